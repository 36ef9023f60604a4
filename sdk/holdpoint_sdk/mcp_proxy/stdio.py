"""The proxy's stdio towards its MCP client: every `tools/call` on a short lane of its own,
everything else through the `mcp` package's server.

Why a lane of its own: the guarded tools/call is what an agent waits for, and the SDK's server
takes four hand-offs to answer one (the reader task, its dispatcher's read loop, a handler task
behind anyio's cancel scopes and middleware, the writer task), plus a pydantic model of each
message built and dumped again: most of the proxy's own cost per call
(bench/mcp_proxy_latency.py). Here the line is read,
decoded once with `json`, checked with the SDK's own tools/call validation for the negotiated
protocol version (`mcp_types.methods.validate_client_request`), handed to the proxy in one
task, and the result is shaped by the SDK's own result surface
(`mcp_types.methods.serialize_server_result`) and written as one line.

The lane opens once the SDK's server has answered `initialize` with a handshake-era protocol
version (a 2026 per-request-envelope connection, or anything before the handshake, stays with
the SDK, which knows those rules). Everything that is not a tools/call, and a
`notifications/cancelled` for a request the lane does not hold, goes to the SDK's server
exactly as `mcp.server.stdio.stdio_server` would hand it over. Like the SDK's dispatcher, the
lane answers an error for an exception (MCPError as it is, invalid params as INVALID_PARAMS,
anything else code 0), never answers a request its client cancelled, and answers
CONNECTION_CLOSED to calls still running when the client goes. A tools/call on the lane may put
a form to the client (`elicitation/create`, decide.py) when the client's `initialize` declared
form elicitation: the request goes out under an id of the lane's own, and its answer is taken
from the client's lines before they reach the SDK's server.

stdin and stdout are used as non-blocking pipes, without threads (an MCP client launches the
proxy with pipes or a socket pair); on anything else (a terminal, a file) `client_channel`
gives None and the caller serves through `stdio_server`, threads and all. Like
`stdio_server`'s own claim, fd 0 and fd 1 are diverted while serving (to the null device and to
stderr), so that a stray print in the proxy cannot corrupt the MCP channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared._context_streams import ContextReceiveStream, ContextSendStream, create_context_streams
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import SessionMessage
from mcp_types import methods
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from .calls import CLIENT_ASK
from .decide import form_capable

logger = logging.getLogger("holdpoint_sdk.mcp_proxy")

READ_CHUNK = 256 * 1024
TOOLS_CALL = "tools/call"
ELICIT = "elicitation/create"
ASK_ID = "holdpoint-ask-"  # the ids of the lane's own requests to the client (never the SDK's)
FORM_MODE_SINCE = "2025-11-25"  # the revision that added `mode` to elicitation/create

CallTool = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class PipeLines:
    """The lines of a pipe as text (`async for line in ...`), of any length, as `stdio_server`'s
    own reader gives them."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.pending = bytearray()
        self.searched = 0  # bytes of `pending` known to hold no newline

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            cut = self.pending.find(b"\n", self.searched)
            if cut >= 0:
                line = bytes(self.pending[: cut + 1])
                del self.pending[: cut + 1]
                self.searched = 0
                return line.decode("utf-8", errors="replace")
            self.searched = len(self.pending)
            chunk = await self.reader.read(READ_CHUNK)
            if not chunk:
                if not self.pending:
                    raise StopAsyncIteration
                line, self.pending, self.searched = bytes(self.pending), bytearray(), 0
                return line.decode("utf-8", errors="replace")
            self.pending += chunk


def _dumps(message: Mapping[str, Any]) -> str:
    # What the SDK writes: compact, UTF-8 as is.
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


class ClientChannel:
    """The MCP client's side of the proxy: `tools/call` answered on the lane, the rest relayed
    to and from the SDK's server through `streams()`."""

    def __init__(self, lines: PipeLines, writer: asyncio.StreamWriter, call_tool: CallTool | None) -> None:
        self.lines = lines
        self.writer = writer
        self.call_tool = call_tool  # None: the server offers no tools, the SDK says so
        # The handshake-era protocol version the SDK's server agreed with the client: the lane
        # is open once it is known.
        self.version: str | None = None
        self._initialize_ids: set[types.RequestId] = set()
        self._calls: dict[types.RequestId, asyncio.Task[None]] = {}
        self._cancelled: set[types.RequestId] = set()  # by the client: never answered
        self.elicits_form = False  # the client's initialize declared form elicitation
        self._asked: dict[str, asyncio.Future[dict[str, Any]]] = {}  # our requests awaiting its answer
        self._asks = 0

    @contextlib.asynccontextmanager
    async def streams(
        self,
    ) -> AsyncIterator[tuple[ContextReceiveStream[SessionMessage | Exception], ContextSendStream[SessionMessage]]]:
        """(read_stream, write_stream) for the SDK server's `run`, as `stdio_server` gives them."""
        to_server, read_stream = create_context_streams[SessionMessage | Exception](0)
        write_stream, from_server = create_context_streams[SessionMessage](0)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read, to_server)
                tg.start_soon(self._write_server, from_server)
                yield read_stream, write_stream
        finally:
            for task in list(self._calls.values()):
                task.cancel()
            if self._calls:
                await asyncio.gather(*self._calls.values(), return_exceptions=True)

    # --- from the client ------------------------------------------------------------------

    async def _read(self, to_server: ContextSendStream[SessionMessage | Exception]) -> None:
        try:
            async with to_server:
                async for line in self.lines:
                    if self.version is not None and self._took(line):
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except Exception as exc:  # the SDK's server answers what it can of a bad line
                        await to_server.send(exc)
                        continue
                    if isinstance(message, types.JSONRPCRequest) and message.method == "initialize":
                        self._initialize_ids.add(coerce_request_id(message.id))
                        capabilities = (message.params or {}).get("capabilities")
                        if isinstance(capabilities, Mapping):
                            self.elicits_form = form_capable(capabilities.get("elicitation"))
                    await to_server.send(SessionMessage(message))
        except anyio.ClosedResourceError:  # the server stopped reading
            pass

    def _took(self, line: str) -> bool:
        """Whether the lane takes this line: a tools/call, the cancellation of one it holds, or
        the client's answer to a form the lane asked."""
        if self._asked and ASK_ID in line and self._took_answer(line):
            return True
        if '"tools/call"' not in line and '"notifications/cancelled"' not in line:
            return False
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return False
        method = message.get("method")
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return False
        if method == TOOLS_CALL and self.call_tool is not None:
            request_id = as_request_id(message.get("id"))
            meta = (params or {}).get("_meta")
            if request_id is None or (isinstance(meta, Mapping) and types.PROTOCOL_VERSION_META_KEY in meta):
                return False  # a notification, or a 2026 envelope: the SDK's server refuses those
            key = coerce_request_id(request_id)
            if key in self._calls:
                return False  # a duplicate id: the SDK's rules, not two answers from here
            self._cancelled.discard(key)
            self._calls[key] = asyncio.get_running_loop().create_task(self._answer(request_id, key, params))
            return True
        if method == "notifications/cancelled":
            cancelled = as_request_id((params or {}).get("requestId"))
            if cancelled is None:
                return False
            key = coerce_request_id(cancelled)
            task = self._calls.get(key)
            if task is None:
                return False
            self._cancelled.add(key)
            task.cancel()
            return True
        return False

    def _took_answer(self, line: str) -> bool:
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or "method" in message:
            return False
        future = self._asked.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or not ("result" in message or "error" in message):
            return False
        if not future.done():
            future.set_result(message)
        return True

    async def ask(self, message: str, schema: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """Put a form to the client (elicitation/create, form mode): its ElicitResult, or None
        for an error, an invalid answer or none within `timeout` (then the request is cancelled)."""
        version = self.version
        assert version is not None
        self._asks += 1
        request_id = f"{ASK_ID}{self._asks}"
        params: dict[str, Any] = {"message": message, "requestedSchema": schema}
        if version >= FORM_MODE_SINCE:
            params["mode"] = "form"
        answered: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._asked[request_id] = answered
        try:
            self._send(_dumps({"jsonrpc": "2.0", "id": request_id, "method": ELICIT, "params": params}))
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()
            try:
                async with asyncio.timeout(timeout):
                    reply = await answered
            except TimeoutError:
                self._cancel_ask(request_id, f"no answer within {timeout:g}s")
                return None
            except asyncio.CancelledError:
                self._cancel_ask(request_id, "the tool call ended")
                raise
        finally:
            del self._asked[request_id]
        result = reply.get("result")
        if not isinstance(result, dict):
            logger.info("the client answered the form with an error: %s", reply.get("error"))
            return None
        try:
            methods.validate_client_result(ELICIT, version, result)
        except (ValidationError, KeyError, ValueError):
            logger.warning("the client's answer to the form is not an ElicitResult; nothing is decided")
            return None
        return result

    def _cancel_ask(self, request_id: str, reason: str) -> None:
        params = {"requestId": request_id, "reason": reason}
        self._send(_dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}))

    async def _answer(self, request_id: types.RequestId, key: types.RequestId, params: dict[str, Any] | None) -> None:
        version, call_tool = self.version, self.call_tool
        assert version is not None and call_tool is not None
        try:
            try:
                methods.validate_client_request(TOOLS_CALL, version, params)
                CLIENT_ASK.set(self.ask if self.elicits_form else None)  # this task's context only
                result = await call_tool(params or {})
                try:
                    shaped = methods.serialize_server_result(TOOLS_CALL, version, result)
                except ValidationError:
                    logger.exception("the answer to tools/call is not a valid CallToolResult")
                    raise MCPError(types.INTERNAL_ERROR, "Handler returned an invalid result") from None
                line = _dumps({"jsonrpc": "2.0", "id": request_id, "result": shaped})
            except asyncio.CancelledError:
                if key in self._cancelled:
                    return  # the client cancelled it: no answer (JSON-RPC, and the SDK's rule)
                self._send_error(request_id, types.ErrorData(code=types.CONNECTION_CLOSED, message="Connection closed"))
                raise
            except Exception as error:
                if key in self._cancelled:
                    return
                data = handler_exception_to_error_data(error)
                if data is None:
                    logger.exception("tools/call failed")
                    data = types.ErrorData(code=0, message=str(error))  # the SDK dispatcher's answer
                self._send_error(request_id, data)
                return
            if key not in self._cancelled:
                self._send(line)
                with contextlib.suppress(ConnectionError):
                    await self.writer.drain()
        finally:
            if self._calls.get(key) is asyncio.current_task():
                del self._calls[key]
            self._cancelled.discard(key)

    # --- to the client --------------------------------------------------------------------

    def _send(self, line: str) -> None:
        """One message, one write: the line and its newline together."""
        if not self.writer.is_closing():
            self.writer.write((line + "\n").encode("utf-8"))

    def _send_error(self, request_id: types.RequestId, error: types.ErrorData) -> None:
        message = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        self._send(message.model_dump_json(by_alias=True, exclude_unset=True))

    async def _write_server(self, from_server: ContextReceiveStream[SessionMessage]) -> None:
        try:
            async with from_server:
                async for session_message in from_server:
                    message = session_message.message
                    if self.version is None and isinstance(message, types.JSONRPCResponse):
                        self._note_handshake(message)
                    self._send(message.model_dump_json(by_alias=True, exclude_unset=True))
                    await self.writer.drain()
        except (anyio.ClosedResourceError, ConnectionError):
            pass

    def _note_handshake(self, response: types.JSONRPCResponse) -> None:
        key = coerce_request_id(response.id)
        if key not in self._initialize_ids:
            return
        self._initialize_ids.discard(key)
        version = response.result.get("protocolVersion")
        if version in KNOWN_PROTOCOL_VERSIONS and version not in MODERN_PROTOCOL_VERSIONS:
            self.version = version


@contextlib.asynccontextmanager
async def client_channel(call_tool: CallTool | None) -> AsyncIterator[ClientChannel | None]:
    """The channel on the proxy's own stdin and stdout, or None when either is not a pipe or a
    socket (then `stdio_server` serves, with its threads). `call_tool` answers the lane's
    tools/call; None when the server has no tools (the SDK's server answers that it has not)."""
    if not (_is_pipe(0) and _is_pipe(1)):
        yield None
        return
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=READ_CHUNK, loop=loop)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(wire_in, "rb", buffering=0)
    )
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), os.fdopen(wire_out, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    try:
        yield ClientChannel(PipeLines(reader), writer, call_tool)
    finally:
        read_transport.close()
        write_transport.close()
