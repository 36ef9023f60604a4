"""What an MCP client sees through `holdpoint-mcp`, and what Holdpoint holds afterwards, for
the seed scenarios. Each test runs a real client session, proxy process, upstream process and
live Holdpoint (see conftest.py); scenarios that need timers run a real Celery worker."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import pytest
from django.db import connection

from accounts.services import reviewer_create
from approvals.services import step_decide
from envelopes.models import Step, Tool
from tests.mcp.conftest import UPSTREAM, Rig
from tests.mcp.upstream_server import TOOLS
from tests.worker import Worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]


def run(rig: Rig, scenario: Callable[[Any], Awaitable[Any]], *args: str, upstream_url: str | None = None) -> Any:
    """Run `scenario(session)` against a fresh proxy; its return value."""

    async def main() -> Any:
        async with rig.session(*args, upstream_url=upstream_url) as session:
            return await scenario(session)

    return anyio.run(main)


def text(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


def holdpoint(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content["holdpoint"]


def step(rig: Rig, tool: str) -> Step:
    steps = list(Step.objects.filter(team=rig.team, tool__name=tool))
    assert len(steps) == 1, [s.operation_ref for s in steps]
    return steps[0]


def test_the_upstream_tools_are_listed_unchanged_and_a_read_passes_straight_through(rig: Rig) -> None:
    async def scenario(session: Any) -> tuple[types.ListToolsResult, types.CallToolResult, types.InitializeResult]:
        return await session.list_tools(), await session.call_tool("get_balance", {}), session.initialize_result

    listed, balance, initialized = run(rig, scenario)

    assert [tool.model_dump(by_alias=True, exclude_none=True) for tool in listed.tools] == [
        tool.model_dump(by_alias=True, exclude_none=True) for tool in TOOLS
    ]
    assert initialized.server_info.name == "seed-tools"
    assert balance.structured_content == {"balance": 1200} and not balance.is_error
    assert not Step.objects.filter(team=rig.team).exists()  # a read-only tool never reaches Holdpoint


def test_a_committed_write_is_reported_and_an_identical_retry_is_refused_without_calling_the_tool(rig: Rig) -> None:
    invoice = {"customer": "cus_1", "amount": 1250}

    async def scenario(session: Any) -> tuple[types.CallToolResult, types.CallToolResult]:
        return await session.call_tool("create_invoice", invoice), await session.call_tool("create_invoice", invoice)

    first, again = run(rig, scenario)

    assert not first.is_error
    assert first.structured_content["invoice_id"] == "inv_1"
    assert holdpoint(first)["directive"]["action"] == "stop"
    assert "is done (committed)" in text(first)
    assert again.is_error and holdpoint(again)["refused"] == "already_committed"
    assert "The tool was not called." in text(again)
    assert len(rig.upstream_calls("create_invoice")) == 1
    created = step(rig, "create_invoice")
    assert (created.state, created.run_id) == ("succeeded", "mcp-e2e")
    assert created.operation_ref == holdpoint(first)["operation_ref"]
    assert created.operation_ref.startswith("mcp-e2e/create_invoice/")
    # The upstream learnt the operation_ref and attempt from the proxy.
    assert rig.upstream_calls("create_invoice")[0]["meta"] == {
        "dev.holdpoint/operation_ref": created.operation_ref,
        "dev.holdpoint/run_id": "mcp-e2e",
        "dev.holdpoint/attempt": 1,
    }


def test_a_write_that_times_out_after_committing_is_verified_by_operation_ref_and_never_repeated(rig: Rig) -> None:
    invoice = {"customer": "cus_2", "amount": 80, "slow": True}

    async def scenario(session: Any) -> tuple[types.CallToolResult, types.CallToolResult]:
        return await session.call_tool("create_invoice", invoice), await session.call_tool("create_invoice", invoice)

    timed_out, again = run(rig, scenario)

    # The proxy gave up after 1.5 s, asked find_invoice by operation_ref, and reported it.
    ref = holdpoint(timed_out)["operation_ref"]
    assert not timed_out.is_error
    assert "did not answer within 1.5s" in text(timed_out) and "verified that it committed" in text(timed_out)
    assert holdpoint(timed_out)["directive"]["action"] == "stop"
    assert again.is_error and holdpoint(again)["refused"] == "already_committed"
    assert [call["arguments"] for call in rig.upstream_calls("find_invoice")] == [{"operation_ref": ref}]
    assert len(rig.upstream_calls("create_invoice")) == 1
    verified = step(rig, "create_invoice")
    assert (verified.state, verified.reason) == ("succeeded", "verified_committed")


def test_a_rate_limit_waits_for_holdpoints_timer_then_the_same_call_goes_through(rig: Rig) -> None:
    email = {"to": "ann@example.com", "subject": "Your invoice"}

    async def first(session: Any) -> types.CallToolResult:
        return await session.call_tool("send_email", email)

    with Worker(sweep_seconds=0.5):
        limited = run(rig, first)
        waiting = step(rig, "send_email")
        assert (waiting.state, waiting.reason) == ("waiting_retry", "retry_not_before")
        # The worker's sweep opens the retry window at not_before.
        assert wait_until(lambda: step(rig, "send_email").state == "retry_ready", timeout=20)

    async def retry(session: Any) -> types.CallToolResult:
        return await session.call_tool("send_email", email)

    sent = run(rig, retry)

    assert limited.is_error
    assert holdpoint(limited)["directive"]["action"] == "wait"
    assert "wait until" in text(limited) and "then call again with the same input" in text(limited)
    assert not sent.is_error and sent.structured_content["message_id"] == "msg_1"
    done = step(rig, "send_email")
    assert (done.state, done.attempts) == ("succeeded", 2)
    # The upstream's envelope knew nothing of Holdpoint: the proxy filled in the step's fields.
    assert done.operation_ref == holdpoint(limited)["operation_ref"] == holdpoint(sent)["operation_ref"]


def test_invalid_input_asks_for_a_fix_refuses_the_same_input_and_takes_a_corrected_one(rig: Rig) -> None:
    async def scenario(session: Any) -> list[types.CallToolResult]:
        return [
            await session.call_tool("create_customer", {"email": "ann.example.com"}),
            await session.call_tool("create_customer", {"email": "ann.example.com"}),
            await session.call_tool("create_customer", {"email": "ann@example.com"}),
        ]

    invalid, same, fixed = run(rig, scenario)

    assert invalid.is_error and holdpoint(invalid)["directive"]["action"] == "fix_input"
    assert "fix the input (field: email)" in text(invalid)
    assert same.is_error and holdpoint(same)["refused"] == "identical_retry"
    assert not fixed.is_error and fixed.structured_content["customer_id"] == "cus_1"
    assert len(rig.upstream_calls("create_customer")) == 2  # the identical retry never reached it
    by_ref = {s.operation_ref: s.state for s in Step.objects.filter(team=rig.team, tool__name="create_customer")}
    assert by_ref == {
        holdpoint(invalid)["operation_ref"]: "needs_input",
        holdpoint(fixed)["operation_ref"]: "succeeded",
    }


def test_a_refund_over_the_limit_waits_for_a_reviewer_and_the_client_receives_the_real_result(rig: Rig) -> None:
    reviewer = reviewer_create(username="rita", password="x-unused-pw-1", team=rig.team, role="reviewer")

    def approve_when_held() -> None:
        try:
            assert wait_until(
                lambda: Step.objects.filter(team=rig.team, state="awaiting_approval").exists(), timeout=30
            )
            held = Step.objects.get(team=rig.team, state="awaiting_approval")
            step_decide(team=rig.team, step_id=held.pk, actor=reviewer, action="approve", reason="customer is known")
        finally:
            connection.close()

    async def scenario(session: Any) -> types.CallToolResult:
        return await session.call_tool("issue_refund", {"order_id": "ord_9", "amount": 900})

    approver = threading.Thread(target=approve_when_held)
    approver.start()
    refunded = run(rig, scenario)
    approver.join()

    assert not refunded.is_error
    assert refunded.structured_content["refund_id"] == "re_1"
    assert holdpoint(refunded)["directive"]["action"] == "stop"
    calls = rig.upstream_calls("issue_refund")
    assert [call["meta"].get("dev.holdpoint/approved") for call in calls] == [None, True]
    done = step(rig, "issue_refund")
    assert done.state == "succeeded"
    assert [d.action for d in done.decisions.all()] == ["approve"]


def test_a_refund_held_past_the_wait_answers_with_the_step_url_at_once(rig: Rig) -> None:
    async def scenario(session: Any) -> types.CallToolResult:
        return await session.call_tool("issue_refund", {"order_id": "ord_7", "amount": 700})

    rig.config_file.write_text("[tools.issue_refund]\nhold_wait_s = 0\n")
    held = run(rig, scenario)

    assert held.is_error and holdpoint(held)["directive"]["action"] == "hold"
    assert f"held for a reviewer at {holdpoint(held)['step_url']}" in text(held)
    assert step(rig, "issue_refund").state == "awaiting_approval"
    assert holdpoint(held)["step_url"].startswith("http")


def test_an_outage_halts_the_tool_and_the_next_charge_is_refused_without_calling_it(rig: Rig) -> None:
    async def scenario(session: Any) -> tuple[types.CallToolResult, types.CallToolResult]:
        return (
            await session.call_tool("charge_card", {"amount": 10}),
            await session.call_tool("charge_card", {"amount": 20}),
        )

    with Worker(sweep_seconds=0.5):
        down, refused = run(rig, scenario)

    assert down.is_error and holdpoint(down)["directive"]["action"] == "wait"
    assert refused.is_error and holdpoint(refused)["refused"] == "tool_halted"
    assert len(rig.upstream_calls("charge_card")) == 1
    assert Tool.objects.get(team=rig.team, name="charge_card").is_halted()
    assert step(rig, "charge_card").state == "waiting_retry"  # the refused charge made no step


def test_an_upstream_over_streamable_http_is_guarded_the_same_way(rig: Rig) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    upstream = subprocess.Popen(
        [sys.executable, str(UPSTREAM), "--http", str(port)], env=rig.env(), stderr=subprocess.DEVNULL
    )
    try:
        assert wait_until(lambda: _accepts(port), timeout=30)
        invoice = {"customer": "cus_http", "amount": 10}

        async def scenario(session: Any) -> tuple[types.ListToolsResult, types.CallToolResult, types.CallToolResult]:
            listed = await session.list_tools()
            return (
                listed,
                await session.call_tool("create_invoice", invoice),
                await session.call_tool("create_invoice", invoice),
            )

        listed, created, again = run(rig, scenario, upstream_url=f"http://127.0.0.1:{port}/mcp")
    finally:
        upstream.terminate()
        upstream.wait(timeout=10)

    assert [tool.name for tool in listed.tools] == [tool.name for tool in TOOLS]
    assert not created.is_error and created.structured_content["invoice_id"] == "inv_1"
    assert again.is_error and holdpoint(again)["refused"] == "already_committed"
    assert step(rig, "create_invoice").state == "succeeded"
    assert len(rig.upstream_calls("create_invoice")) == 1


def _accepts(port: int) -> bool:
    with socket.socket() as client:
        return client.connect_ex(("127.0.0.1", port)) == 0


def test_with_holdpoint_unreachable_a_guarded_call_is_not_made(rig: Rig) -> None:
    async def scenario(session: Any) -> tuple[types.CallToolResult, types.CallToolResult]:
        return await session.call_tool("create_invoice", {"customer": "c", "amount": 1}), await session.call_tool(
            "get_balance", {}
        )

    async def main() -> Any:
        async with rig.session(HOLDPOINT_URL="http://127.0.0.1:9") as session:
            return await scenario(session)

    guarded, read = anyio.run(main)

    assert guarded.is_error and "Holdpoint could not be reached" in text(guarded)
    assert "the call was not made" in text(guarded)
    assert rig.upstream_calls("create_invoice") == []
    assert read.structured_content == {"balance": 1200}  # read-only tools do not need Holdpoint


def test_a_rejected_refund_is_never_made_and_the_client_is_told_to_stop(rig: Rig) -> None:
    reviewer = reviewer_create(username="rex", password="x-unused-pw-2", team=rig.team, role="reviewer")

    def reject_when_held() -> None:
        try:
            assert wait_until(
                lambda: Step.objects.filter(team=rig.team, state="awaiting_approval").exists(), timeout=30
            )
            held = Step.objects.get(team=rig.team, state="awaiting_approval")
            step_decide(team=rig.team, step_id=held.pk, actor=reviewer, action="reject", reason="duplicate refund")
        finally:
            connection.close()

    async def scenario(session: Any) -> types.CallToolResult:
        return await session.call_tool("issue_refund", {"order_id": "ord_8", "amount": 800})

    rejecter = threading.Thread(target=reject_when_held)
    rejecter.start()
    rejected = run(rig, scenario)
    rejecter.join()

    assert rejected.is_error
    assert holdpoint(rejected)["directive"]["action"] == "stop"
    assert "is closed (rejected); do not call this tool again for it." in text(rejected)
    assert len(rig.upstream_calls("issue_refund")) == 1  # only the call that asked for approval
    assert (step(rig, "issue_refund").state, step(rig, "issue_refund").reason) == ("cancelled", "rejected")


def test_a_client_that_names_its_operation_in_meta_gets_that_step_whatever_the_input(rig: Rig) -> None:
    meta = {"dev.holdpoint/operation_ref": "order-42/invoice", "dev.holdpoint/run_id": "agent-run-7"}

    async def scenario(session: Any) -> tuple[types.CallToolResult, types.CallToolResult]:
        first = await session.call_tool("create_invoice", {"customer": "cus_42", "amount": 10}, meta=meta)
        # The agent retries the same operation with a reworded input: still the same write.
        again = await session.call_tool(
            "create_invoice", {"customer": "cus_42", "amount": 10.0, "memo": "x"}, meta=meta
        )
        return first, again

    first, again = run(rig, scenario)

    assert not first.is_error and holdpoint(first)["operation_ref"] == "order-42/invoice"
    assert again.is_error and holdpoint(again)["refused"] == "already_committed"
    assert len(rig.upstream_calls("create_invoice")) == 1
    created = step(rig, "create_invoice")
    assert (created.operation_ref, created.run_id, created.state) == ("order-42/invoice", "agent-run-7", "succeeded")
    # The proxy owns its namespace: the upstream sees the step's keys, set by the proxy.
    assert rig.upstream_calls("create_invoice")[0]["meta"]["dev.holdpoint/operation_ref"] == "order-42/invoice"


def test_with_timings_on_each_guarded_call_says_where_its_time_went(rig: Rig, tmp_path: Any) -> None:
    log = tmp_path / "proxy.log"

    async def main() -> None:
        with log.open("w") as errlog:
            async with rig.session(errlog=errlog, HOLDPOINT_MCP_TIMINGS="1") as session:
                await session.call_tool("create_invoice", {"customer": "cus_t", "amount": 3})
                await session.call_tool("get_balance", {})  # read-only: not guarded, no line

    anyio.run(main)

    lines = [line for line in log.read_text().splitlines() if " timing " in line]
    assert len(lines) == 1
    words = dict(word.split("=", 1) for word in lines[0].split() if "=" in word)
    assert words["tool"] == "create_invoice"
    parts = {name: float(words[f"{name}_ms"]) for name in ("gate", "upstream", "envelope", "proxy", "total")}
    assert all(ms > 0 for ms in parts.values())
    assert parts["total"] >= parts["gate"] + parts["upstream"] + parts["envelope"]
