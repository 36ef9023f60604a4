#!/usr/bin/env python
"""The seed scenarios through `holdpoint-mcp`, as an MCP client sees them, against a running
Holdpoint (scripts/run):

    .venv/bin/python examples/mcp/run_scenarios.py --base-url http://127.0.0.1:8000 --api-key hp_...

It launches the proxy the way an MCP client would (the `command` / `args` / `env` of
examples/mcp/mcp_client_config.json), with examples/mcp/holdpoint-mcp.toml as its config and the
small MCP server of the test suite (tests/mcp/upstream_server.py) as the upstream, then calls
tools and prints what came back. Scenarios (`--scenario NAME`, default all):

  committed        create_invoice commits; the identical call again is refused (already_committed)
  unknown_outcome  create_invoice answers after the proxy's timeout, having committed: the proxy
                   asks find_invoice by operation_ref and reports it (verified_committed)
  rate_limit       send_email is rate limited -> wait until not_before; the same call then sends
  invalid_input    create_customer refuses an email -> fix_input; the same input is refused; a
                   corrected one is created
  approval         issue_refund over 500 -> held for a reviewer (prints the step page); with
                   --wait-for-approval SECONDS the proxy waits, and after an Approve in the
                   dashboard the call returns the real refund; a reviewer who edits the input
                   (say the amount) and approves gets the refund made with their input, and
                   the answer says so
  outage           charge_card: the payment service is down (scope: service) -> the tool halts;
                   the next charge is refused without calling it
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent.parent
UPSTREAM = ROOT / "tests" / "mcp" / "upstream_server.py"
CONFIG = Path(__file__).resolve().parent / "holdpoint-mcp.toml"
SCENARIOS = ("committed", "unknown_outcome", "rate_limit", "invalid_input", "approval", "outage")


def show(label: str, result: types.CallToolResult) -> dict[str, Any]:
    lines = [block.text for block in result.content if isinstance(block, types.TextContent)]
    structured = result.structured_content if isinstance(result.structured_content, dict) else {}
    block = structured.get("holdpoint") or {}
    print(f"  {label}: isError={result.is_error} state={block.get('state')}")
    for line in lines:
        print(f"    {line}")
    if block.get("input_edited"):
        print(f"    (the tool ran the reviewer's input: {block.get('input')})")
    if block.get("input_withheld"):
        print(f"    (Holdpoint got the input's fingerprint only: {block['input_withheld']})")
    return block


async def scenario(session: ClientSession, name: str, run: str) -> None:
    print(f"== {name}")
    if name == "committed":
        invoice = {"customer": f"cus_{run}", "amount": 1250}
        show("create_invoice", await session.call_tool("create_invoice", invoice))
        show("the same call again", await session.call_tool("create_invoice", invoice))
    elif name == "unknown_outcome":
        slow = {"customer": f"cus_{run}_slow", "amount": 80, "slow": True}
        show("create_invoice (slow)", await session.call_tool("create_invoice", slow))
    elif name == "rate_limit":
        email = {"to": "ann@example.com", "subject": f"Invoice {run}"}
        block = show("send_email", await session.call_tool("send_email", email))
        not_before = (block.get("directive") or {}).get("not_before")
        print(f"  waiting until {not_before}")
        await anyio.sleep(3)
        show("send_email again", await session.call_tool("send_email", email))
    elif name == "invalid_input":
        show("create_customer", await session.call_tool("create_customer", {"email": "ann.example.com"}))
        show("the same input", await session.call_tool("create_customer", {"email": "ann.example.com"}))
        show("a corrected input", await session.call_tool("create_customer", {"email": f"ann+{run}@example.com"}))
    elif name == "approval":
        print("  (approve it, or edit the amount and approve, on the step page it prints when --wait-for-approval")
        print("  is given)")
        refund = {"order_id": f"ord_{run}", "amount": 900}
        show("issue_refund", await session.call_tool("issue_refund", refund))
    elif name == "outage":
        show("charge_card", await session.call_tool("charge_card", {"amount": 10}))
        show("another charge", await session.call_tool("charge_card", {"amount": 20}))


async def main(args: argparse.Namespace) -> None:
    run = f"{time.strftime('%H%M%S')}-{uuid.uuid4().hex[:4]}"
    env = {
        **os.environ,
        "HOLDPOINT_URL": args.base_url,
        "HOLDPOINT_API_KEY": args.api_key,
        "HOLDPOINT_RUN_ID": f"mcp-example-{run}",
        "UPSTREAM_SLOW_S": "4",
        "UPSTREAM_RETRY_S": "2",
    }
    proxy = [
        "-m",
        "holdpoint_sdk.mcp_proxy",
        "--config",
        str(CONFIG),
        "--hold-wait",
        str(args.wait_for_approval),
        "--upstream",
        f"{sys.executable} {UPSTREAM}",
    ]
    parameters = StdioServerParameters(command=sys.executable, args=proxy, env=env, cwd=str(ROOT))
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        print(f"tools through the proxy: {', '.join(tool.name for tool in tools.tools)}")
        for name in args.scenario or SCENARIOS:
            await scenario(session, name, run)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("HOLDPOINT_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", default=os.environ.get("HOLDPOINT_API_KEY", ""))
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--wait-for-approval", type=float, default=0, metavar="SECONDS")
    arguments = parser.parse_args()
    if not arguments.api_key:
        parser.error("an API key is needed: the one scripts/run printed (--api-key or HOLDPOINT_API_KEY)")
    anyio.run(main, arguments)
