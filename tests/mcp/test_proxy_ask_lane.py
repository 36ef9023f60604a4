"""The lane's forms to the client (holdpoint_sdk.mcp_proxy.stdio, `ClientChannel.ask`): a
tools/call on the lane may send `elicitation/create` to a client whose `initialize` declared
form elicitation, and takes the answer from the client's lines before the SDK's server sees
them; no answer in time is cancelled towards the client. The end-to-end scenarios are in
test_proxy_elicitation.py; these pin the protocol edges."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from holdpoint_sdk.mcp_proxy.calls import CLIENT_ASK
from holdpoint_sdk.mcp_proxy.decide import form_capable
from holdpoint_sdk.mcp_proxy.server import build_server
from holdpoint_sdk.mcp_proxy.stdio import ClientChannel, PipeLines
from mcp import ClientSession
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.shared.memory import create_client_server_memory_streams

from tests.mcp.test_proxy_lanes import Client, _pipe

SCHEMA = {"type": "object", "properties": {"reason": {"type": "string"}}, "required": []}


async def asking(params: Mapping[str, Any]) -> dict[str, Any]:
    """A tools/call that puts one form to the client (with the timeout the call names) and
    answers with what came back."""
    ask = CLIENT_ASK.get()
    if ask is None:
        return {"content": [{"type": "text", "text": "cannot ask"}], "isError": False}
    timeout = float((params.get("arguments") or {}).get("timeout", 5))
    answer = await ask("Approve?", SCHEMA, timeout)
    return {"content": [{"type": "text", "text": repr(answer)}], "isError": False}


@asynccontextmanager
async def lane(capabilities: dict[str, Any], version: str = "2025-11-25") -> AsyncIterator[Client]:
    client_in, proxy_out = await _pipe()
    proxy_in, client_out = await _pipe()
    channel = ClientChannel(PipeLines(proxy_in), proxy_out, asking)
    server: Server[Any] = Server("asks")
    options = InitializationOptions(
        server_name="asks", server_version="0", capabilities=types.ServerCapabilities(tools=types.ToolsCapability())
    )
    async with anyio.create_task_group() as tg, channel.streams() as (read, write):
        tg.start_soon(server.run, read, write, options)
        client = Client(client_out, client_in)
        params = {"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "t", "version": "0"}}
        client.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params})
        assert (await client.receive())["result"]["protocolVersion"] == version
        client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield client
        client_out.close()


def text(answer: dict[str, Any]) -> str:
    return str(answer["result"]["content"][0]["text"])


def test_a_form_goes_to_a_client_that_declared_elicitation_and_its_answer_to_the_call() -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with lane({"elicitation": {"form": {}}}) as client:
            client.call(1, {"name": "hold", "arguments": {}})
            asked = await client.receive()
            accepted = {"action": "accept", "content": {"reason": "ok"}}
            client.send({"jsonrpc": "2.0", "id": asked["id"], "result": accepted})
            answer = await client.receive()
            client.call(2, {"name": "hold", "arguments": {}})
            second = await client.receive()
            client.send({"jsonrpc": "2.0", "id": second["id"], "result": {"action": "decline"}})
            await client.receive()
        return asked, answer, second

    asked, answer, second = asyncio.run(scenario())

    assert asked == {
        "jsonrpc": "2.0",
        "id": "holdpoint-ask-1",
        "method": "elicitation/create",
        "params": {"message": "Approve?", "requestedSchema": SCHEMA, "mode": "form"},
    }
    assert answer["id"] == 1 and text(answer) == "{'action': 'accept', 'content': {'reason': 'ok'}}"
    assert second["id"] == "holdpoint-ask-2"


def test_no_answer_in_time_is_cancelled_towards_the_client_and_an_error_answer_is_none() -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with lane({"elicitation": {}}, version="2025-06-18") as client:
            client.call(1, {"name": "hold", "arguments": {"timeout": 0.2}})
            asked = await client.receive()
            cancelled = await client.receive()
            timed_out = await client.receive()
            client.call(2, {"name": "hold", "arguments": {}})
            again = await client.receive()
            client.send({"jsonrpc": "2.0", "id": again["id"], "error": {"code": -32600, "message": "no"}})
            refused = await client.receive()
        return asked, cancelled, timed_out, refused

    asked, cancelled, timed_out, refused = asyncio.run(scenario())

    assert "mode" not in asked["params"]  # 2025-06-18 knows form mode only, without the field
    assert cancelled == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": asked["id"], "reason": "no answer within 0.2s"},
    }
    assert timed_out["id"] == 1 and text(timed_out) == "None"
    assert refused["id"] == 2 and text(refused) == "None"


def test_a_client_without_form_elicitation_is_never_asked() -> None:
    async def scenario(capabilities: dict[str, Any]) -> dict[str, Any]:
        async with lane(capabilities) as client:
            client.call(1, {"name": "hold", "arguments": {}})
            return await client.receive()

    for capabilities in ({}, {"elicitation": {"url": {}}}, {"sampling": {}}):
        answer = asyncio.run(scenario(capabilities))
        assert answer["id"] == 1 and text(answer) == "cannot ask", capabilities
    assert form_capable({}) and form_capable({"form": {}, "url": {}}) and not form_capable(None)


class AskingProxy:
    """What `build_server` needs of the proxy: tools/call asks the client through CLIENT_ASK."""

    async def call_tool(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return await asking(params)

    async def forward(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"tools": []}


def test_through_the_sdks_server_a_form_goes_by_the_session_to_a_client_that_declared_it() -> None:
    """Off the lane (stdin not a pipe, or before the lane opens) the SDK's handler asks."""
    upstream = types.InitializeResult(
        protocol_version="2025-11-25",
        capabilities=types.ServerCapabilities(tools=types.ToolsCapability()),
        server_info=types.Implementation(name="up", version="1"),
    )
    server, options = build_server(AskingProxy(), upstream)  # type: ignore[arg-type]
    asked: list[types.ElicitRequestParams] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"reason": "fine"})

    async def scenario(callback: Any) -> str:
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(server.run, *server_streams, options)
            async with ClientSession(*client_streams, elicitation_callback=callback) as session:
                await session.initialize()
                result = await session.call_tool("hold", {})
            tg.cancel_scope.cancel()
        block = result.content[0]
        assert isinstance(block, types.TextContent)
        return block.text

    assert anyio.run(scenario, answer) == "{'action': 'accept', 'content': {'reason': 'fine'}}"
    assert len(asked) == 1 and asked[0].message == "Approve?"
    assert anyio.run(scenario, None) == "cannot ask"  # no callback: no capability declared
