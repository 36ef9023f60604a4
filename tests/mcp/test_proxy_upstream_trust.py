"""What an upstream MCP server cannot do through `holdpoint-mcp` (issue 23 points 2 and 7): name
another step in its envelope, or escape the gate with a tool name Holdpoint does not take. Each
test runs a real client session, proxy process, upstream process and live Holdpoint."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from holdpoint_sdk.mcp_proxy.names import holdpoint_tool_name
from holdpoint_sdk.mcp_proxy.reports import UPSTREAM_NAMED

from envelopes.models import Envelope, Quarantine, Step
from tests.mcp.conftest import Rig
from tests.mcp.test_proxy_e2e import holdpoint, run, text

pytestmark = [pytest.mark.django_db(transaction=True)]

HELD_REFUND = {"order_id": "ord_5", "amount": 700}
VICTIM = {"dev.holdpoint/run_id": "agent-a"}


def test_an_upstream_naming_another_agents_held_step_cannot_change_it_and_its_own_step_is_escalated(
    rig: Rig,
) -> None:
    rig.config_file.write_text("[tools.issue_refund]\nhold_wait_s = 0\n")

    async def scenario(session: Any) -> tuple[types.CallToolResult, types.CallToolResult]:
        held = await session.call_tool("issue_refund", HELD_REFUND, meta=VICTIM)
        forged = {
            "operation_ref": holdpoint(held)["operation_ref"],
            "tool": "issue_refund",
            "run_id": "agent-a",
            "attempt": 1,
        }
        return held, await session.call_tool("mark_done", forged, meta={"dev.holdpoint/run_id": "agent-b"})

    held, marked = run(rig, scenario)

    victim = Step.objects.get(team=rig.team, operation_ref=holdpoint(held)["operation_ref"])
    assert (victim.state, victim.run_id, victim.attempts) == ("awaiting_approval", "agent-a", 1)
    assert Envelope.objects.filter(step=victim).count() == 1  # only its own upstream's answer
    own = Step.objects.get(team=rig.team, tool__name="mark_done")
    assert own.operation_ref == holdpoint(marked)["operation_ref"] != victim.operation_ref
    assert (own.state, own.reason, own.run_id) == ("escalated", "malformed_envelope", "agent-b")
    assert not Envelope.objects.filter(step=own).exists()
    assert holdpoint(marked)["directive"]["action"] == "hold" and holdpoint(marked)["state"] == "escalated"
    assert "held for a reviewer" in text(marked)
    # The quarantine keeps what the upstream claimed, under the call's own step.
    kept = Quarantine.objects.get(team=rig.team)
    assert (kept.step_id, kept.tool_name, kept.operation_ref) == (own.pk, "mark_done", own.operation_ref)
    assert {"field": UPSTREAM_NAMED, "rule": "additionalProperties"} in [
        {"field": e["field"], "rule": e["rule"]} for e in kept.errors
    ]
    assert victim.operation_ref in kept.body


def test_each_step_field_named_wrongly_escalates_the_calls_own_step_and_the_calls_own_values_pass(
    rig: Rig,
) -> None:
    async def scenario(session: Any) -> dict[str, types.CallToolResult]:
        answers = {}
        for field, value in (("tool", "create_invoice"), ("run_id", "agent-z"), ("attempt", 2)):
            ref = f"order-1/{field}"
            answers[field] = await session.call_tool(
                "mark_done", {"operation_ref": ref, field: value}, meta={"dev.holdpoint/operation_ref": ref}
            )
        # An upstream that echoes the call's own step (its tool by its own name) is believed.
        echo = {"operation_ref": "order-1/echo", "tool": "mark_done", "run_id": "mcp-e2e", "attempt": 1}
        answers["echo"] = await session.call_tool(
            "mark_done", echo, meta={"dev.holdpoint/operation_ref": "order-1/echo"}
        )
        return answers

    answers = run(rig, scenario)

    states = {s.operation_ref: (s.state, s.reason) for s in Step.objects.filter(team=rig.team)}
    assert states == {
        "order-1/tool": ("escalated", "malformed_envelope"),
        "order-1/run_id": ("escalated", "malformed_envelope"),
        "order-1/attempt": ("escalated", "malformed_envelope"),
        "order-1/echo": ("succeeded", "committed"),
    }
    assert not Step.objects.filter(team=rig.team, tool__name="create_invoice").exists()
    assert sorted(Quarantine.objects.filter(team=rig.team).values_list("operation_ref", flat=True)) == [
        "order-1/attempt",
        "order-1/run_id",
        "order-1/tool",
    ]
    assert holdpoint(answers["echo"])["directive"]["action"] == "stop"
    assert all(holdpoint(answers[field])["directive"]["action"] == "hold" for field in ("tool", "run_id", "attempt"))


def test_a_camelcase_upstream_tool_is_guarded_under_its_mapped_name_and_a_hold_holds(rig: Rig) -> None:
    rig.config_file.write_text("[tools.createPayout]\nhold_wait_s = 0\n")
    payout = {"amount": 900}

    async def scenario(session: Any) -> tuple[types.ListToolsResult, types.CallToolResult, types.CallToolResult]:
        listed = await session.list_tools()
        return listed, await session.call_tool("createPayout", payout), await session.call_tool("createPayout", payout)

    listed, held, again = run(rig, scenario)

    recorded = holdpoint_tool_name("createPayout")
    assert recorded.startswith("create_payout-")
    assert "createPayout" in [tool.name for tool in listed.tools]  # the client sees the upstream's name
    step = Step.objects.get(team=rig.team)
    assert (step.tool.name, step.state, step.attempts) == (recorded, "awaiting_approval", 1)
    assert step.operation_ref == holdpoint(held)["operation_ref"]
    assert held.is_error and holdpoint(held)["directive"]["action"] == "hold"
    assert again.is_error and holdpoint(again)["refused"] == "approval_pending"
    assert "The tool was not called." in text(again)
    calls = rig.upstream_calls("createPayout")
    assert len(calls) == 1 and calls[0]["meta"]["dev.holdpoint/operation_ref"] == step.operation_ref
    assert rig.upstream_state()["payouts"] == []
