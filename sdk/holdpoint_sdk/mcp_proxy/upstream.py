"""The upstream MCP server as the proxy sees it: what it needs of the connection (`Upstream`),
an MCP `ClientSession` as one (`SessionUpstream`, for a server over streamable HTTP), and the
server launched over stdio (`StdioUpstream`): the proxy's own requests (a guarded tools/call,
a verification tool, what it passes through) on a short lane, the handshake and whatever the
server asks of its client through the `mcp` package's `ClientSession`.

Why a lane: each tools/call the proxy makes to its upstream is on the agent's critical path,
and `ClientSession.send_request` takes it through a writer task, the dispatcher's read loop and
a memory stream per request, and a pydantic model of each message built and parsed again. Here
the request is written as one line, and the reader hands the answer to the waiting call
directly: an answer whose id is one of the lane's (ids `holdpoint-mcp-N`, never an id the
session mints) is decoded once with `json`; every other line goes to the session exactly as
`mcp.client.stdio.stdio_client` hands it over. The lane keeps the session's contract: an error
answer is an `MCPError`, a timeout sends the server a `notifications/cancelled` and raises
TimeoutError, a call cancelled by its caller is cancelled upstream too, and a server that goes
away fails what is waiting with CONNECTION_CLOSED.

The process is started and stopped as `stdio_client` does it: its own session (process group),
stdin closed first, then SIGTERM to the group after 2 s, SIGKILL after 2 more.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from .stdio import READ_CHUNK, PipeLines

logger = logging.getLogger("holdpoint_sdk.mcp_proxy")

LANE_ID_PREFIX = "holdpoint-mcp-"
EXIT_GRACE_S = 2.0  # after stdin closes (mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT)
KILL_GRACE_S = 2.0  # after SIGTERM (mcp.client.stdio.FORCE_KILL_TIMEOUT)
_EXIT_POLL_S = 0.01


class Upstream(Protocol):
    """What the proxy needs of the upstream connection (an MCP ClientSession)."""

    async def request(self, method: str, params: Mapping[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        """Send one request; its raw result (wire names). Raises MCPError, TimeoutError."""
        ...


class _RawRequest(types.Request[dict[str, Any] | None, str]):
    """Any request, its params passed as they came (the typed requests would drop what they
    do not model)."""

    method: str
    params: dict[str, Any] | None = None


class SessionUpstream:
    """An MCP `ClientSession` as the proxy's upstream: raw requests, raw results."""

    def __init__(self, session: Any) -> None:
        from pydantic import TypeAdapter

        self.session = session
        self._raw = TypeAdapter(dict[str, Any])

    async def request(self, method: str, params: Mapping[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        request = _RawRequest(method=method, params=dict(params) if params is not None else None)
        try:
            result: dict[str, Any] = await self.session.send_request(
                request, self._raw, request_read_timeout_seconds=timeout
            )
        except MCPError as error:
            if error.code == types.REQUEST_TIMEOUT:
                raise TimeoutError(error.message) from error
            raise
        return result


def _dumps(message: Mapping[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _parse_line(line: str) -> SessionMessage | Exception:
    """One line for the session, as `stdio_client` parses it (a bad line is passed as a value)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        logger.warning("the upstream server wrote a line that is not JSON-RPC: %s", exc)
        return exc


class StdioUpstream:
    """The upstream's stdin and stdout: `request()` is the proxy's lane (the proxy's `Upstream`),
    `session_streams` the (read, write) pair for the `ClientSession`."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdin = process.stdin
        self.lines = PipeLines(process.stdout)
        self._ids = itertools.count(1)
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._closed = False
        self._to_session, self._session_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self._session_write, self._from_session = anyio.create_memory_object_stream[SessionMessage](0)

    @property
    def session_streams(
        self,
    ) -> tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]:
        return self._session_read, self._session_write

    # --- the lane -------------------------------------------------------------------------

    async def request(self, method: str, params: Mapping[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        """Send one request; its raw result (wire names). Raises MCPError, TimeoutError."""
        if self._closed:
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed")
        request_id = f"{LANE_ID_PREFIX}{next(self._ids)}"
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params:
            message["params"] = params
        answer = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answer
        try:
            self._write(_dumps(message))
            try:
                await self.stdin.drain()  # at once, unless the server has stopped reading its stdin
            except ConnectionError:
                raise MCPError(types.CONNECTION_CLOSED, "Connection closed") from None
            try:
                return await asyncio.wait_for(answer, timeout)
            except TimeoutError:
                self._cancel_upstream(request_id, f"timed out after {timeout}s")
                raise TimeoutError(f"Request {method!r} timed out") from None
            except asyncio.CancelledError:
                self._cancel_upstream(request_id, "caller cancelled")
                raise
        finally:
            self._pending.pop(request_id, None)
            if not answer.done():
                answer.cancel()

    def _cancel_upstream(self, request_id: str, reason: str) -> None:
        """The courtesy cancel the SDK sends, so that the server stops working on it."""
        params = {"requestId": request_id, "reason": reason}
        self._write(_dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}))

    def _write(self, data: bytes) -> None:
        # One message, one write; the pipe transport buffers what the server has not read yet.
        if not self.stdin.is_closing():
            self.stdin.write(data)

    def _settle(self, line: str) -> bool:
        """Whether the line answers a lane request (then its waiter has it)."""
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict) or "method" in message:
            return False
        request_id = message.get("id")
        answer = self._pending.get(request_id) if isinstance(request_id, str) else None
        if answer is None:
            return False
        if not answer.done():
            error = message.get("error")
            result = message.get("result")
            if isinstance(error, Mapping):
                code, text = error.get("code"), error.get("message")
                if isinstance(code, int) and not isinstance(code, bool) and isinstance(text, str):
                    answer.set_exception(MCPError(code, text, error.get("data")))
                else:
                    answer.set_exception(MCPError(types.INTERNAL_ERROR, "the server answered with a malformed error"))
            elif isinstance(result, dict):
                answer.set_result(result)
            else:
                answer.set_exception(MCPError(types.INTERNAL_ERROR, "the server answered without a result object"))
        return True

    # --- the pumps ------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            async with self._to_session:
                async for line in self.lines:
                    if not line.strip():
                        continue
                    if self._pending and LANE_ID_PREFIX in line and self._settle(line):
                        continue
                    try:
                        await self._to_session.send(_parse_line(line))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return  # the session is gone
        finally:
            self._closed = True
            for answer in self._pending.values():
                if not answer.done():
                    answer.set_exception(MCPError(types.CONNECTION_CLOSED, "Connection closed"))

    async def _write_session(self) -> None:
        try:
            async with self._from_session:
                async for session_message in self._from_session:
                    json_text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    self._write((json_text + "\n").encode("utf-8"))
                    await self.stdin.drain()
        except (anyio.ClosedResourceError, ConnectionError):
            await self._to_session.aclose()

    async def _stop(self) -> None:
        """Close stdin, give the server its grace period, then end its process group."""
        process = self.process
        with contextlib.suppress(OSError, RuntimeError):
            self.stdin.close()
        if await _exited(process, EXIT_GRACE_S):
            return
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            if await _exited(process, grace):
                return
        logger.warning("upstream MCP server %d is still alive after SIGKILL; abandoning it", process.pid)


async def _exited(process: asyncio.subprocess.Process, seconds: float) -> bool:
    # Not process.wait(): it also waits for the pipes' EOF, which a child of the server can hold.
    deadline = asyncio.get_running_loop().time() + seconds
    while process.returncode is None:
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(_EXIT_POLL_S)
    return True


@contextlib.asynccontextmanager
async def stdio_upstream(command: str, args: Sequence[str], env: Mapping[str, str]) -> AsyncIterator[StdioUpstream]:
    """Launch the upstream server and run its pumps until the block ends, then stop it."""
    process = await asyncio.create_subprocess_exec(
        command,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,  # the proxy's stderr, as stdio_client's errlog
        env=get_default_environment() | dict(env),
        start_new_session=True,
        limit=READ_CHUNK,
    )
    upstream = StdioUpstream(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(upstream._read)
            tg.start_soon(upstream._write_session)
            try:
                yield upstream
            finally:
                with anyio.CancelScope(shield=True):
                    upstream._session_write.close()
                    await upstream._stop()
                tg.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
