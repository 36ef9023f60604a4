"""holdpoint-mcp passes the agent's W3C trace context on to Holdpoint (contract §13): the MCP
client's `_meta.traceparent` of a tools/call goes with every Holdpoint call the proxy makes for
it, so the step keeps the agent's trace; a call without one leaves no trace."""

from __future__ import annotations

from typing import Any

import pytest

from envelopes.models import Attempt, Envelope, Step
from tests.mcp.conftest import Rig
from tests.mcp.test_proxy_e2e import run

pytestmark = [pytest.mark.django_db(transaction=True)]

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"


def test_the_mcp_clients_traceparent_reaches_the_step(rig: Rig) -> None:
    async def scenario(session: Any) -> None:
        meta = {"traceparent": f"00-{TRACE}-{AGENT_SPAN}-01", "tracestate": "vendor=x"}
        await session.call_tool("create_invoice", {"customer": "cus_t", "amount": 5}, meta=meta)
        await session.call_tool("create_invoice", {"customer": "cus_u", "amount": 6})

    run(rig, scenario)

    traced, untraced = sorted(Step.objects.filter(team=rig.team), key=lambda step: step.created_at)
    assert (traced.trace_id, traced.trace_parent_id) == (TRACE, AGENT_SPAN)
    assert Attempt.objects.get(step=traced).trace_id == TRACE  # the gate
    assert Envelope.objects.get(step=traced).trace_id == TRACE  # the report
    assert untraced.trace_id == ""
