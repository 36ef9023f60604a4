"""The proposed input through `holdpoint-mcp` (contract v1.1 §4): the tool call's arguments go to
the attempt gate for the reviewer to read; an input the gate will not take is gated by its
fingerprint alone and the call still works; after an approval with an edited input the
upstream runs the reviewer's input and the client is told so. Real client, proxy, upstream and
live Holdpoint, as in test_proxy_e2e.py."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import mcp_types as types
import pytest
from django.db import connection
from holdpoint_sdk import Holdpoint

from accounts.services import reviewer_create
from approvals.services import step_decide
from envelopes.models import Step
from tests.mcp.conftest import Rig
from tests.mcp.test_proxy_e2e import holdpoint, run, step, text
from tests.worker import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": True}
    for _ in range(depth):
        value = {"next": value}
    return value


def proposal(rig: Rig, operation_ref: str) -> Any:
    with Holdpoint(rig.url, rig.api_key) as hp:
        return hp.get_step(operation_ref)["proposal"]


def test_the_tool_calls_arguments_are_what_the_reviewer_reads(rig: Rig) -> None:
    refund = {"order_id": "ord_3", "amount": 900}
    rig.config_file.write_text("[tools.issue_refund]\nhold_wait_s = 0\n")

    held = run(rig, lambda session: session.call_tool("issue_refund", refund))

    assert held.is_error and holdpoint(held)["directive"]["action"] == "hold"
    assert holdpoint(held)["input_sent"] is True and "input_withheld" not in holdpoint(held)
    shown = proposal(rig, holdpoint(held)["operation_ref"])
    assert shown["input"] == refund and shown["input_redacted"] is False


def test_an_input_the_gate_refuses_is_gated_by_its_fingerprint_and_the_call_still_runs(rig: Rig) -> None:
    # 40 levels deep: the proxy cannot know the gate's depth limit (32), the gate answers 422.
    invoice = {"customer": "cus_deep", "amount": 5, "meta": nested(40)}

    created = run(rig, lambda session: session.call_tool("create_invoice", invoice))

    assert not created.is_error and created.structured_content["invoice_id"] == "inv_1"
    block = holdpoint(created)
    assert block["input_sent"] is False and "Holdpoint refused it (max_depth)" in block["input_withheld"]
    assert block["directive"]["action"] == "stop"
    assert [call["arguments"] for call in rig.upstream_calls("create_invoice")] == [invoice]
    assert step(rig, "create_invoice").state == "succeeded"
    assert proposal(rig, block["operation_ref"])["input"] is None


def test_a_held_call_whose_input_is_over_the_limit_tells_the_model_the_reviewer_sees_a_fingerprint(
    rig: Rig,
) -> None:
    refund = {"order_id": "ord_4", "amount": 900, "note": "x" * (40 * 1024)}
    rig.config_file.write_text("[tools.issue_refund]\nhold_wait_s = 0\n")

    held = run(rig, lambda session: session.call_tool("issue_refund", refund))

    assert held.is_error and holdpoint(held)["directive"]["action"] == "hold"
    assert holdpoint(held)["input_sent"] is False
    assert "The reviewer sees only the input's fingerprint: its canonical form is" in text(held)
    assert "over the 32768 the gate takes" in text(held)
    assert step(rig, "issue_refund").state == "awaiting_approval"


def _approve_with_edit(rig: Rig, edited: dict[str, Any]) -> None:
    reviewer = reviewer_create(username="eddie", password="x-unused-pw-3", team=rig.team, role="reviewer")
    try:
        assert wait_until(lambda: Step.objects.filter(team=rig.team, state="awaiting_approval").exists(), timeout=30)
        held = Step.objects.get(team=rig.team, state="awaiting_approval")
        step_decide(
            team=rig.team, step_id=held.pk, actor=reviewer, action="approve", reason="half", edited_input=edited
        )
    finally:
        connection.close()


def test_a_reviewer_edit_made_while_the_proxy_waits_is_what_the_upstream_runs(rig: Rig) -> None:
    asked, edited = {"order_id": "ord_9", "amount": 900}, {"order_id": "ord_9", "amount": 450}
    approver = threading.Thread(target=_approve_with_edit, args=(rig, edited))
    approver.start()
    refunded = run(rig, lambda session: session.call_tool("issue_refund", asked))
    approver.join()

    assert not refunded.is_error and refunded.structured_content["refund_id"] == "re_1"
    assert [call["arguments"] for call in rig.upstream_calls("issue_refund")] == [asked, edited]
    assert rig.upstream_calls("issue_refund")[1]["meta"]["dev.holdpoint/approved"] is True
    block = holdpoint(refunded)
    assert block["input_edited"] is True and block["input"] == edited
    assert "A reviewer approved an edited input: the tool was called with it, not with yours" in text(refunded)
    done = step(rig, "issue_refund")
    assert (done.state, done.operation_ref) == ("succeeded", block["operation_ref"])


def test_after_an_edited_approval_the_clients_same_call_runs_the_approved_input(rig: Rig) -> None:
    asked, edited = {"order_id": "ord_5", "amount": 900}, {"order_id": "ord_5", "amount": 450}
    rig.config_file.write_text("[tools.issue_refund]\nhold_wait_s = 0\n")

    async def scenario(session: Any) -> tuple[types.CallToolResult, types.CallToolResult]:
        held = await session.call_tool("issue_refund", asked)
        await anyio.to_thread.run_sync(_approve_with_edit, rig, edited)
        return held, await session.call_tool("issue_refund", asked)  # the model calls again, as told

    held, refunded = run(rig, scenario)

    assert held.is_error and holdpoint(held)["directive"]["action"] == "hold"
    assert not refunded.is_error and refunded.structured_content["refund_id"] == "re_1"
    assert [call["arguments"] for call in rig.upstream_calls("issue_refund")] == [asked, edited]
    assert holdpoint(refunded)["input_edited"] is True
    done = step(rig, "issue_refund")
    assert done.state == "succeeded"
    assert [d.action for d in done.decisions.all()] == ["approve"]  # not held a second time
