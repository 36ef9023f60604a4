"""What an MCP client sees through `holdpoint-mcp`, and what Holdpoint holds afterwards, for
the seed scenarios. Each test runs a real client session, proxy process, upstream process and
live Holdpoint (see conftest.py); scenarios that need timers run a real Celery worker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import pytest

from envelopes.models import Step
from tests.mcp.conftest import Rig
from tests.mcp.upstream_server import TOOLS

pytestmark = [pytest.mark.django_db(transaction=True)]


def run(rig: Rig, scenario: Callable[[Any], Awaitable[Any]], *args: str) -> Any:
    """Run `scenario(session)` against a fresh proxy; its return value."""

    async def main() -> Any:
        async with rig.session(*args) as session:
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
