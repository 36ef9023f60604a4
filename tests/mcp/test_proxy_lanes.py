"""The proxy's short lanes for tools/call (holdpoint_sdk.mcp_proxy.stdio and .upstream): what a
client and an upstream server see of them is what the `mcp` SDK's server and session would
give (the same answers, errors, cancellations and closings), and what the lanes do not take
still goes through the SDK. The end-to-end tests run every scenario over both lanes; these
pin the protocol edges the scenarios do not reach."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from holdpoint_sdk.mcp_proxy import upstream as upstream_module
from holdpoint_sdk.mcp_proxy.stdio import ClientChannel, PipeLines
from holdpoint_sdk.mcp_proxy.upstream import stdio_upstream
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

WAIT_S = 5.0


async def _pipe() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", 0))
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


class Client:
    """The MCP client's end of the proxy's stdio, one JSON line at a time."""

    def __init__(self, to_proxy: asyncio.StreamWriter, from_proxy: asyncio.StreamReader) -> None:
        self.to_proxy = to_proxy
        self.from_proxy = from_proxy

    def send(self, message: Mapping[str, Any]) -> None:
        self.to_proxy.write((json.dumps(message) + "\n").encode())

    def call(self, request_id: int, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    async def receive(self, timeout: float = WAIT_S) -> dict[str, Any]:
        line = await asyncio.wait_for(self.from_proxy.readline(), timeout)
        assert line, "the proxy closed its stdout"
        message: dict[str, Any] = json.loads(line)
        return message

    async def handshake(self) -> None:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        self.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params})
        answer = await self.receive()
        assert answer["result"]["protocolVersion"] == "2025-11-25"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


class Tools:
    """What the proxy's tools/call does, for these tests: answers by tool name, and says which
    side (the lane, or the SDK server's handler) was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        self.cancelled: list[str] = []

    async def lane(self, params: Mapping[str, Any]) -> dict[str, Any]:
        name = str(params["name"])
        self.asked.append(("lane", name))
        if name == "refused":
            raise MCPError(types.INVALID_PARAMS, "no such customer", {"field": "customer"})
        if name == "broken":
            raise RuntimeError("the proxy broke")
        if name == "wait":
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
        return {"content": [{"type": "text", "text": name}], "isError": False, "notInTheSpec": 1}

    async def sdk(self, ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
        self.asked.append(("sdk", ctx.params["name"] if ctx.params else "?"))
        return {"content": [], "isError": False}


@asynccontextmanager
async def proxy_stdio(tools: Tools, *, offers_tools: bool = True) -> AsyncIterator[Client]:
    """A ClientChannel in front of an SDK server whose tools/call handler is `tools.sdk` (or,
    without `offers_tools`, a server with no tools at all, as the proxy is for such an upstream)."""
    client_in, proxy_out = await _pipe()
    proxy_in, client_out = await _pipe()
    channel = ClientChannel(PipeLines(proxy_in), proxy_out, tools.lane if offers_tools else None)
    server: Server[Any] = Server("lanes")
    if offers_tools:
        server.add_request_handler("tools/call", types.CallToolRequestParams, tools.sdk)
    options = InitializationOptions(
        server_name="lanes",
        server_version="0",
        capabilities=types.ServerCapabilities(tools=types.ToolsCapability() if offers_tools else None),
    )
    async with anyio.create_task_group() as tg, channel.streams() as (read, write):
        tg.start_soon(server.run, read, write, options)
        yield Client(client_out, client_in)
        client_out.close()  # EOF: the server's run ends, and the channel with it


def test_before_the_handshake_a_tools_call_is_the_sdks_to_answer_and_after_it_the_lanes() -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, str]]]:
        tools = Tools()
        async with proxy_stdio(tools) as client:
            client.call(1, {"name": "early", "arguments": {}})
            early = await client.receive()
            await client.handshake()
            client.call(2, {"name": "create_invoice", "arguments": {"amount": 1}})
            answer = await client.receive()
        return early, answer, tools.asked

    early, answer, asked = asyncio.run(scenario())

    assert early["id"] == 1 and early["error"]["code"] == types.INVALID_PARAMS  # the SDK's init gate
    assert answer == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"content": [{"type": "text", "text": "create_invoice"}], "isError": False},
    }
    assert asked == [("lane", "create_invoice")]


def test_a_server_without_tools_answers_tools_call_method_not_found_as_the_sdk_does() -> None:
    async def scenario() -> tuple[dict[str, Any], list[tuple[str, str]]]:
        tools = Tools()
        async with proxy_stdio(tools, offers_tools=False) as client:
            await client.handshake()
            client.call(1, {"name": "create_invoice", "arguments": {}})
            answer = await client.receive()
        return answer, tools.asked

    answer, asked = asyncio.run(scenario())

    assert answer["error"]["code"] == types.METHOD_NOT_FOUND
    assert asked == []


def test_the_lane_answers_errors_as_the_sdk_server_does() -> None:
    async def scenario() -> tuple[dict[int, dict[str, Any]], list[tuple[str, str]]]:
        tools = Tools()
        async with proxy_stdio(tools) as client:
            await client.handshake()
            client.call(1, {"arguments": {}})  # no tool name
            client.call(2, {"name": "refused", "arguments": {}})
            client.call(3, {"name": "broken", "arguments": {}})
            answers = [await client.receive() for _ in range(3)]
        return {answer["id"]: answer for answer in answers}, tools.asked

    answers, asked = asyncio.run(scenario())

    assert answers[1]["error"] == {"code": types.INVALID_PARAMS, "message": "Invalid request parameters", "data": ""}
    assert answers[2]["error"] == {
        "code": types.INVALID_PARAMS,
        "message": "no such customer",
        "data": {"field": "customer"},
    }
    assert answers[3]["error"] == {"code": 0, "message": "the proxy broke"}
    assert asked == [("lane", "refused"), ("lane", "broken")]  # invalid params never reach the proxy


def test_a_call_the_client_cancels_is_stopped_and_never_answered() -> None:
    async def scenario() -> tuple[list[dict[str, Any]], list[str]]:
        tools = Tools()
        async with proxy_stdio(tools) as client:
            await client.handshake()
            client.call(7, {"name": "wait", "arguments": {}})
            await asyncio.sleep(0.2)
            client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
            client.call(8, {"name": "after", "arguments": {}})
            seen = [await client.receive()]
            with pytest.raises(TimeoutError):
                seen.append(await client.receive(timeout=0.5))
        return seen, tools.cancelled

    seen, cancelled = asyncio.run(scenario())

    assert [answer["id"] for answer in seen] == [8]
    assert cancelled == ["wait"]


def test_a_call_still_running_when_the_client_leaves_is_answered_connection_closed() -> None:
    async def scenario() -> dict[str, Any]:
        tools = Tools()
        async with proxy_stdio(tools) as client:
            await client.handshake()
            client.call(9, {"name": "wait", "arguments": {}})
            await asyncio.sleep(0.2)
        return await client.receive()

    answer = asyncio.run(scenario())

    assert answer == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": types.CONNECTION_CLOSED, "message": "Connection closed"},
    }


# --- the upstream's lane --------------------------------------------------------------------

FAKE_UPSTREAM = textwrap.dedent(
    """
    import json, sys
    log = open(sys.argv[1], "a")
    held = []
    def answer(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()
    for line in sys.stdin:
        message = json.loads(line)
        method, params = message.get("method"), message.get("params") or {}
        if method == "notifications/cancelled":
            log.write(json.dumps(params) + "\\n"); log.flush()
        elif method == "later":
            held.append(message)
        elif method == "flush":
            log_line = {"level": "info", "data": "flushing"}
            answer({"jsonrpc": "2.0", "method": "notifications/message", "params": log_line})
            for earlier in reversed(held):
                answer({"jsonrpc": "2.0", "id": earlier["id"], "result": {"got": earlier["params"]}})
            answer({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        elif method == "ping":
            answer({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        elif method == "fail":
            answer({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "bad amount"}})
        elif method == "exit":
            sys.exit(0)
    """
)


@asynccontextmanager
async def fake_upstream(tmp_path: Path) -> AsyncIterator[tuple[upstream_module.StdioUpstream, Path]]:
    script, log = tmp_path / "fake_upstream.py", tmp_path / "cancelled.jsonl"
    script.write_text(FAKE_UPSTREAM)
    log.touch()
    async with stdio_upstream(sys.executable, [str(script), str(log)], {}) as upstream:
        yield upstream, log


def test_answers_reach_their_own_waiters_whatever_their_order_and_the_rest_goes_to_the_session(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[list[Any], SessionMessage | Exception]:
        async with fake_upstream(tmp_path) as (upstream, _):
            first = asyncio.ensure_future(upstream.request("later", {"n": 1}, None))
            second = asyncio.ensure_future(upstream.request("later", {"n": 2}, None))
            await asyncio.sleep(0.1)
            flushed = asyncio.ensure_future(upstream.request("flush", None, WAIT_S))
            read, _ = upstream.session_streams
            with anyio.fail_after(WAIT_S):
                for_session = await read.receive()  # as the ClientSession would, all along
            await flushed
            return [await first, await second], for_session

    answers, for_session = asyncio.run(scenario())

    assert answers == [{"got": {"n": 1}}, {"got": {"n": 2}}]
    assert isinstance(for_session, SessionMessage)
    assert isinstance(for_session.message, types.JSONRPCNotification)
    assert for_session.message.method == "notifications/message"


def test_an_error_answer_is_an_mcp_error_and_a_timeout_is_cancelled_upstream(tmp_path: Path) -> None:
    async def scenario() -> tuple[MCPError, str, list[dict[str, Any]]]:
        async with fake_upstream(tmp_path) as (upstream, log):
            with pytest.raises(MCPError) as refused:
                await upstream.request("fail", {"amount": -1}, WAIT_S)
            with pytest.raises(TimeoutError) as timed_out:
                await upstream.request("later", {"n": 3}, 0.2)
            await upstream.request("ping", None, WAIT_S)  # the cancellation has been read by now
            return refused.value, str(timed_out.value), [json.loads(line) for line in log.read_text().splitlines()]

    refused, timed_out, cancelled = asyncio.run(scenario())

    assert (refused.error.code, refused.error.message) == (types.INVALID_PARAMS, "bad amount")
    assert "timed out" in timed_out
    assert len(cancelled) == 1 and cancelled[0]["requestId"].startswith(upstream_module.LANE_ID_PREFIX)


def test_a_server_that_exits_fails_what_waits_and_what_comes_after_with_connection_closed(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[int], int | None]:
        async with fake_upstream(tmp_path) as (upstream, _):
            waiting = asyncio.ensure_future(upstream.request("later", {"n": 4}, None))
            exiting = asyncio.ensure_future(upstream.request("exit", None, None))
            codes = []
            for attempt in (waiting, exiting):
                with pytest.raises(MCPError) as closed:
                    await asyncio.wait_for(attempt, WAIT_S)
                codes.append(closed.value.error.code)
            with pytest.raises(MCPError) as after:
                await upstream.request("later", {"n": 5}, None)
            codes.append(after.value.error.code)
            process = upstream.process
        return codes, process.returncode

    codes, returncode = asyncio.run(scenario())

    assert codes == [types.CONNECTION_CLOSED] * 3
    assert returncode == 0  # it exited; nothing was left running


def test_a_server_that_ignores_its_closed_stdin_is_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_module, "EXIT_GRACE_S", 0.2)
    script = tmp_path / "stubborn.py"
    script.write_text("import time\nwhile True:\n    time.sleep(1)\n")

    async def scenario() -> int | None:
        async with stdio_upstream(sys.executable, [str(script)], {}) as upstream:
            process = upstream.process
        return process.returncode

    assert asyncio.run(scenario()) is not None
