"""The asyncio client does what the sync one does."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from holdpoint_sdk import AsyncHoldpoint, AttemptRefused, input_fingerprint

from .conftest import FakeApi, problem, step


def test_an_async_guard_runs_a_coroutine_and_reports_a_timeout(ahp: AsyncHoldpoint, api: FakeApi) -> None:
    async def create_invoice(payload: dict) -> dict:
        raise httpx.ReadTimeout("slow")

    async def run():  # type: ignore[no-untyped-def]
        async with (
            ahp,
            ahp.guard(tool="create_invoice", operation_ref="r/1", input={"a": 1}) as guard,
        ):
            return await guard.call(create_invoice, {"a": 1})

    outcome = asyncio.run(run())
    assert api.bodies("attempts")[0]["input_fingerprint"] == input_fingerprint({"a": 1})
    assert api.bodies("envelopes")[0]["commit_state"] == "unknown"
    assert outcome.action == "verify"


def test_async_guarded_call_accepts_a_plain_function(ahp: AsyncHoldpoint, api: FakeApi) -> None:
    outcome = asyncio.run(ahp.guarded_call(tool="create_invoice", operation_ref="r", input={}, call=lambda: {"id": 7}))
    assert outcome.ok and api.bodies("envelopes")[0]["result"] == {"id": 7}


def test_async_errors_are_typed(ahp: AsyncHoldpoint, api: FakeApi) -> None:
    held = step("awaiting_approval", "hold")
    api.script("attempts", problem(409, "approval_pending", step=held, directive=held["directive"]))
    with pytest.raises(AttemptRefused) as caught:
        asyncio.run(ahp.request_attempt("r", tool="t", input_fingerprint="0" * 64))
    assert caught.value.directive["action"] == "hold"


def test_async_wait_and_cursor_iteration(ahp: AsyncHoldpoint, api: FakeApi, sleeps: list[float]) -> None:
    api.script(
        "step",
        httpx.Response(200, json=step("verifying", "verify"), headers={"ETag": '"1"'}),
        httpx.Response(304, headers={"ETag": '"1"'}),
        httpx.Response(200, json=step("succeeded", "stop"), headers={"ETag": '"2"'}),
    )
    api.script(
        "steps",
        httpx.Response(200, json={"results": [step()], "next": "https://x/api/v1/steps?cursor=n"}),
        httpx.Response(200, json={"results": [step()], "next": None}),
    )

    async def run():  # type: ignore[no-untyped-def]
        decided = await ahp.wait_for_decision("r", initial_interval=0.5)
        listed = [s async for s in ahp.list_steps()]
        return decided, listed

    decided, listed = asyncio.run(run())
    assert decided["state"] == "succeeded" and len(sleeps) == 2
    assert len(listed) == 2
    assert api.of("step")[1].headers["If-None-Match"] == '"1"'
