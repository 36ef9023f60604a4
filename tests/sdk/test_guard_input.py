"""The guard sends the input it fingerprints (contract v1.1), and after an approval with edits it
runs the reviewer's input, never the original."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
from typing import Any

import httpx
import pytest
import rfc8785
from holdpoint_sdk import (
    ApprovedInputNotPassed,
    AsyncHoldpoint,
    Holdpoint,
    ValidationFailed,
    input_fingerprint,
)

from .conftest import FakeApi, problem, step

REFUND = {"order": "ord_7", "amount": 900}
EDITED = {"order": "ord_7", "amount": 400}


def approved(input: dict[str, Any] | None) -> dict[str, Any]:
    """The step after an approval: retry_ready, the directive carrying the edited input."""
    body = step("retry_ready", "proceed", reason="approved", operation_ref="refund/1", tool="issue_refund")
    body["directive"] = {"action": "proceed", "may_write": True, "not_before": None, "reason": "approved"}
    if input is not None:
        body["directive"] |= {"input": input, "input_fingerprint": input_fingerprint(input)}
    return body


def test_the_gate_gets_the_input_it_fingerprints(hp: Holdpoint, api: FakeApi) -> None:
    sent_at = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    payload = {"amount": 1e21, "note": "caf\u00e9 \U0001f600", "when": sent_at, "lines": [[1, 0.1], {}]}
    outcome = hp.guarded_call(tool="create_invoice", operation_ref="r", input=payload, call=lambda: {"id": 1})
    [gate] = api.bodies("attempts")
    # What the server recomputes: SHA-256 over the RFC 8785 form of the `input` it received.
    assert gate["input"]["when"] == "2026-11-30T12:00:00+00:00"
    assert gate["input_fingerprint"] == hashlib.sha256(rfc8785.dumps(gate["input"])).hexdigest()
    assert gate["input_fingerprint"] == input_fingerprint(payload)
    assert outcome.input_sent and not outcome.input_edited and outcome.input is payload


def test_send_input_false_keeps_the_input_in_the_agent(hp: Holdpoint, api: FakeApi) -> None:
    secret = {"card_number": "4111 1111 1111 1111"}
    outcome = hp.guarded_call(
        tool="charge_card", operation_ref="r", input=secret, call=lambda: {"id": 1}, send_input=False
    )
    [request] = api.of("attempts")
    assert json.loads(request.content) == {"tool": "charge_card", "input_fingerprint": input_fingerprint(secret)}
    assert b"4111" not in request.content
    assert outcome.ok and not outcome.input_sent


def test_an_input_that_is_not_an_object_is_fingerprinted_only(hp: Holdpoint, api: FakeApi) -> None:
    outcome = hp.guarded_call(tool="search", operation_ref="r", input=["ada", 1], call=lambda: [])
    [gate] = api.bodies("attempts")
    assert "input" not in gate and gate["input_fingerprint"] == input_fingerprint(["ada", 1])
    assert not outcome.input_sent


def test_an_input_over_32_kib_is_fingerprinted_only_and_the_log_says_why(
    hp: Holdpoint, api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    big = {"body": "x" * (32 * 1024)}
    with caplog.at_level(logging.WARNING, logger="holdpoint_sdk"):
        guard = hp.guard(tool="send_email", operation_ref="r", input=big)
        outcome = guard.call(lambda: {"id": 1})
    [gate] = api.bodies("attempts")
    assert "input" not in gate and gate["input_fingerprint"] == input_fingerprint(big)
    assert outcome.ok and not outcome.input_sent
    assert guard.input_withheld is not None and "over the 32768" in guard.input_withheld
    assert "not sending the input of send_email on r" in caplog.text
    assert "xxxx" not in caplog.text  # the log names the reason, never the input


def test_an_input_the_gate_refuses_is_sent_again_as_a_fingerprint_under_a_new_key(
    hp: Holdpoint, api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    deep: dict[str, Any] = {"a": {"b": {"c": {"d": {}}}}}
    api.script("attempts", problem(422, "schema_invalid", errors=[{"field": "input", "rule": "max_depth"}]))
    calls: list[dict[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="holdpoint_sdk"):
        outcome = hp.guarded_call(tool="t", operation_ref="r", input=deep, call=calls.append)
    first, second = api.of("attempts")
    assert json.loads(first.content)["input"] == deep
    assert json.loads(second.content) == {"tool": "t", "input_fingerprint": input_fingerprint(deep)}
    assert first.headers["Idempotency-Key"] != second.headers["Idempotency-Key"]
    assert calls == [deep] and outcome.ok and not outcome.input_sent
    assert "refused the input of t on r (max_depth)" in caplog.text


def test_a_fingerprint_mismatch_is_an_error_not_a_silent_fallback(hp: Holdpoint, api: FakeApi) -> None:
    api.script(
        "attempts",
        problem(422, "fingerprint_mismatch", errors=[{"field": "input_fingerprint", "rule": "matches_input"}]),
    )
    calls: list[object] = []
    with pytest.raises(ValidationFailed) as caught:
        hp.guarded_call(tool="t", operation_ref="r", input=REFUND, call=calls.append)
    assert caught.value.code == "fingerprint_mismatch"
    assert calls == [] and len(api.of("attempts")) == 1 and api.of("envelopes") == []


def test_after_an_edited_approval_the_guard_runs_the_approved_input(hp: Holdpoint, api: FakeApi) -> None:
    api.script("step", httpx.Response(200, json=approved(EDITED), headers={"ETag": '"2"'}))
    decided = hp.wait_for_decision("refund/1")
    assert decided["directive"]["input"] == EDITED
    ran: list[dict[str, Any]] = []

    def refund(payload: dict[str, Any], *, approved: bool) -> dict[str, str]:
        ran.append(payload)
        return {"refund_id": "re_1"}

    with hp.guard(tool="issue_refund", operation_ref="refund/1", input=REFUND) as guard:
        assert guard.input == EDITED and guard.input_edited
        outcome = guard.call(refund, REFUND, approved=True)
    assert ran == [EDITED]
    [gate] = api.bodies("attempts")
    assert (gate["input"], gate["input_fingerprint"]) == (EDITED, input_fingerprint(EDITED))
    assert outcome.ok and outcome.input_edited and outcome.input == EDITED
    # The grant used the approval: the next guard on the step runs its own input again.
    assert hp.approved_input("refund/1") is None
    assert hp.guard(tool="issue_refund", operation_ref="refund/1", input=REFUND).input is REFUND


def test_guarded_call_hands_the_approved_input_to_a_call_that_takes_one(hp: Holdpoint, api: FakeApi) -> None:
    hp.get_step_if_changed("refund/1", etag=None)  # any read of the step counts
    api.script("step", httpx.Response(200, json=approved(EDITED)))
    hp.get_step("refund/1")
    ran: list[dict[str, Any]] = []
    outcome = hp.guarded_call(tool="issue_refund", operation_ref="refund/1", input=REFUND, call=ran.append)
    assert ran == [EDITED] and outcome.input_edited


def test_a_call_that_cannot_be_given_the_approved_input_is_never_granted(hp: Holdpoint, api: FakeApi) -> None:
    api.script("step", httpx.Response(200, json=approved(EDITED)))
    hp.get_step("refund/1")
    ran: list[dict[str, Any]] = []
    with pytest.raises(ApprovedInputNotPassed, match="refund/1"):
        hp.guarded_call(tool="issue_refund", operation_ref="refund/1", input=REFUND, call=lambda: ran.append(REFUND))
    assert ran == [] and api.of("attempts") == [] and api.of("envelopes") == []


def test_an_approval_without_edits_runs_the_agents_own_input(hp: Holdpoint, api: FakeApi) -> None:
    api.script("step", httpx.Response(200, json=approved(None)))
    hp.get_step("refund/1")
    ran: list[dict[str, Any]] = []
    outcome = hp.guarded_call(tool="issue_refund", operation_ref="refund/1", input=REFUND, call=ran.append)
    assert ran == [REFUND] and not outcome.input_edited
    assert api.bodies("attempts")[0]["input_fingerprint"] == input_fingerprint(REFUND)


def test_an_edit_that_changes_nothing_is_not_reported_as_an_edit(hp: Holdpoint, api: FakeApi) -> None:
    api.script("step", httpx.Response(200, json=approved(dict(reversed(list(REFUND.items()))))))
    hp.get_step("refund/1")
    guard = hp.guard(tool="issue_refund", operation_ref="refund/1", input=REFUND)
    assert guard.input is REFUND and not guard.input_edited


def test_the_async_guard_runs_the_approved_input_too(ahp: AsyncHoldpoint, api: FakeApi) -> None:
    api.script("step", httpx.Response(200, json=approved(EDITED)))
    ran: list[dict[str, Any]] = []

    async def refund(payload: dict[str, Any]) -> dict[str, str]:
        ran.append(payload)
        return {"refund_id": "re_1"}

    async def run():  # type: ignore[no-untyped-def]
        async with ahp:
            await ahp.wait_for_decision("refund/1")
            return await ahp.guarded_call(tool="issue_refund", operation_ref="refund/1", input=REFUND, call=refund)

    outcome = asyncio.run(run())
    assert ran == [EDITED] and outcome.input_edited and outcome.input == EDITED
    assert api.bodies("attempts")[0]["input"] == EDITED


def test_the_async_guard_falls_back_to_the_fingerprint_when_the_gate_refuses_the_input(
    ahp: AsyncHoldpoint, api: FakeApi
) -> None:
    api.script("attempts", problem(422, "schema_invalid", errors=[{"field": "input", "rule": "max_bytes"}]))

    async def run():  # type: ignore[no-untyped-def]
        async with ahp:
            return await ahp.guarded_call(tool="t", operation_ref="r", input=REFUND, call=lambda: {"id": 1})

    outcome = asyncio.run(run())
    first, second = api.bodies("attempts")
    assert first["input"] == REFUND and "input" not in second
    assert outcome.ok and not outcome.input_sent
