"""The proxy's HTTP client for Holdpoint (holdpoint_sdk.mcp_proxy.http) against real sockets: a
small HTTP/1.1 server in the test (h11, an implementation of the protocol independent of the
client's, on asyncio) that can keep connections alive, close them, chunk its answers or never
answer, and counts the connections it accepted; and raw bytes for the framings h11 would not
send."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import h11
import httpx
import pytest
from holdpoint_sdk.errors import AttemptRefused, HoldpointUnavailable
from holdpoint_sdk.mcp_proxy.http import LeanAsyncHoldpoint, LeanHttp, lean_http_for

GRANT = {
    "attempt": 1,
    "step": {"operation_ref": "r/1", "state": "in_progress", "directive": {"action": "proceed"}},
    "directive": {"action": "proceed", "may_write": True, "not_before": None, "reason": "attempt_granted"},
}


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    """What the test server saw, and how it answers (`answer(seen) -> (status, headers, body)`)."""

    answer: Callable[[Seen], tuple[int, list[tuple[str, str]], bytes]]
    keep_alive: bool = True
    chunked: bool = False
    stall: bool = False
    close_idle_after_first: bool = False
    connections: int = 0
    requests: list[Seen] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                seen = await self._read_request(conn, reader)
                if seen is None:
                    return
                self.requests.append(seen)
                if self.stall:
                    await asyncio.sleep(2)  # past the client's timeout, short enough not to hold the test
                status, headers, body = self.answer(seen)
                headers = [*headers, ("Content-Type", "application/json")]
                if not self.keep_alive:
                    headers.append(("Connection", "close"))
                if self.chunked:
                    headers.append(("Transfer-Encoding", "chunked"))
                    out = conn.send(h11.Response(status_code=status, headers=headers))
                    for start in range(0, len(body), 7):
                        out += conn.send(h11.Data(data=body[start : start + 7]))
                else:
                    headers.append(("Content-Length", str(len(body))))
                    out = conn.send(h11.Response(status_code=status, headers=headers)) + conn.send(h11.Data(data=body))
                writer.write(out + conn.send(h11.EndOfMessage()))
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE or self.close_idle_after_first:
                    return
                conn.start_next_cycle()
        finally:
            writer.close()

    @staticmethod
    async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> Seen | None:
        request: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data and request is None:
                    return None
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return Seen(
                    method=request.method.decode(),
                    target=request.target.decode(),
                    headers={k.decode().lower(): v.decode() for k, v in request.headers},
                    body=body,
                )
            elif isinstance(event, h11.ConnectionClosed):
                return None


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[Server]:
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield server


def ok(body: Any = None, status: int = 201) -> Callable[[Seen], tuple[int, list[tuple[str, str]], bytes]]:
    return lambda seen: (status, [("ETag", '"v1"')], json.dumps(body if body is not None else GRANT).encode())


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_requests_share_one_kept_alive_connection_and_carry_the_clients_headers() -> None:
    async def scenario() -> tuple[Server, list[httpx.Response]]:
        async with serving(Server(ok())) as server:
            http = LeanHttp(f"http://127.0.0.1:{server.port}/", headers={"Authorization": "Bearer hp_k"}, timeout=5)
            answers = [
                await http.request(
                    "POST", "/api/v1/envelopes", content=b'{"a":1}', headers={"Idempotency-Key": f"k{i}"}
                )
                for i in range(3)
            ]
            answers.append(await http.request("GET", "/api/v1/steps", params={"state": "held", "tool": None}))
            await http.aclose()
            return server, answers

    server, answers = run(scenario())

    assert server.connections == 1
    assert [a.status_code for a in answers] == [201, 201, 201, 201]
    assert answers[0].json() == GRANT and answers[0].headers["etag"] == '"v1"'
    first = server.requests[0]
    assert (first.method, first.target, first.body) == ("POST", "/api/v1/envelopes", b'{"a":1}')
    assert first.headers["authorization"] == "Bearer hp_k"
    assert first.headers["idempotency-key"] == "k0"
    assert first.headers["host"] == f"127.0.0.1:{server.port}"
    assert server.requests[3].target == "/api/v1/steps?state=held"


def test_a_server_that_closes_each_connection_gets_a_new_one_per_request() -> None:
    async def scenario() -> Server:
        async with serving(Server(ok(), keep_alive=False)) as server:
            http = LeanHttp(f"http://127.0.0.1:{server.port}", headers={}, timeout=5)
            for _ in range(3):
                assert (await http.request("GET", "/healthz")).json() == GRANT
            await http.aclose()
            return server

    assert run(scenario()).connections == 3


def test_a_chunked_answer_is_read_whole() -> None:
    body = {"step": {"operation_ref": "x" * 100}, "directive": {"action": "stop"}}

    async def scenario() -> httpx.Response:
        async with serving(Server(ok(body), chunked=True)) as server:
            http = LeanHttp(f"http://127.0.0.1:{server.port}", headers={}, timeout=5)
            answer = await http.request("GET", "/x")
            await http.aclose()
            return answer

    assert run(scenario()).json() == body


def test_a_kept_alive_connection_the_server_closed_is_replaced_for_a_request_safe_to_repeat() -> None:
    async def scenario() -> tuple[Server, int]:
        async with serving(Server(ok(), close_idle_after_first=True)) as server:
            http = LeanHttp(f"http://127.0.0.1:{server.port}", headers={}, timeout=5)
            await http.request("POST", "/a", content=b"{}", headers={"Idempotency-Key": "k1"})
            # The server closed it after answering; whether or not we have seen the FIN yet, the
            # keyed request goes through on a new connection.
            second = await http.request("POST", "/a", content=b"{}", headers={"Idempotency-Key": "k2"})
            await http.aclose()
            return server, second.status_code

    server, status = run(scenario())
    assert status == 201
    assert server.connections == 2
    assert [seen.headers["idempotency-key"] for seen in server.requests] == ["k1", "k2"]


def test_nothing_listening_is_holdpoint_unavailable_and_the_gate_is_not_assumed() -> None:
    async def scenario() -> None:
        async with LeanAsyncHoldpoint("http://127.0.0.1:9", "hp_k", timeout=2, max_retries=0) as hp:
            assert hp.lean
            await hp.request_attempt("r/1", tool="t", input_fingerprint="0" * 64, idempotency_key="a1")

    with pytest.raises(HoldpointUnavailable):
        run(scenario())


def test_an_answer_that_never_comes_times_out_as_a_read_timeout() -> None:
    async def scenario() -> None:
        async with serving(Server(ok(), stall=True)) as server:
            http = LeanHttp(f"http://127.0.0.1:{server.port}", headers={}, timeout=0.3)
            try:
                await http.request("GET", "/slow")
            finally:
                await http.aclose()

    with pytest.raises(httpx.ReadTimeout):
        run(scenario())


def test_the_sdk_client_over_it_maps_refusals_and_grants_as_over_httpx() -> None:
    refusal = {
        "type": "about:blank",
        "title": "refused",
        "status": 409,
        "code": "already_committed",
        "detail": "done",
        "step": {"operation_ref": "r/1", "state": "succeeded"},
        "directive": {"action": "stop", "may_write": False, "not_before": None, "reason": "already_committed"},
    }

    def answer(seen: Seen) -> tuple[int, list[tuple[str, str]], bytes]:
        if seen.target.endswith("/refused/attempts"):
            return 409, [], json.dumps(refusal).encode()
        return 201, [], json.dumps(GRANT).encode()

    async def scenario() -> tuple[Any, AttemptRefused, Server]:
        async with serving(Server(answer)) as server:
            async with LeanAsyncHoldpoint(f"http://127.0.0.1:{server.port}", "hp_k") as hp:
                grant = await hp.request_attempt("r/1", tool="t", input_fingerprint="0" * 64, idempotency_key="a1")
                with pytest.raises(AttemptRefused) as refused:
                    await hp.request_attempt("refused", tool="t", input_fingerprint="0" * 64, idempotency_key="a2")
            return grant, refused.value, server

    grant, refused, server = run(scenario())
    assert grant["attempt"] == 1
    assert refused.code == "already_committed" and refused.directive["action"] == "stop"
    assert server.requests[0].target == "/api/v1/steps/r%2F1/attempts"
    assert json.loads(server.requests[0].body)["input_fingerprint"] == "0" * 64
    assert server.connections == 1


def test_httpx_stays_where_the_lean_client_does_not_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    async def probe(url: str) -> bool:
        return lean_http_for(url, headers={}, timeout=1) is not None

    assert run(probe("http://127.0.0.1:8000"))
    assert run(probe("https://holdpoint.example"))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert not run(probe("https://holdpoint.example"))
    monkeypatch.setenv("NO_PROXY", "holdpoint.example")
    assert run(probe("https://holdpoint.example"))
    assert lean_http_for("http://127.0.0.1:8000", headers={}, timeout=1) is None  # no running loop


def test_a_host_name_is_looked_up_once_while_its_address_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    original = LeanHttp._open

    async def recording(self: LeanHttp, address: str) -> Any:
        opened.append(address)
        return await original(self, address)

    monkeypatch.setattr(LeanHttp, "_open", recording)

    async def scenario() -> Server:
        async with serving(Server(ok(), keep_alive=False)) as server:
            http = LeanHttp(f"http://localhost:{server.port}", headers={}, timeout=5)
            for _ in range(3):
                assert (await http.request("GET", "/healthz")).status_code == 201
            await http.aclose()
            return server

    server = run(scenario())

    assert server.connections == 3
    assert opened == ["localhost", "127.0.0.1", "127.0.0.1"]
    assert server.requests[2].headers["host"] == f"localhost:{server.port}"


@asynccontextmanager
async def answering_raw(answers: list[bytes]) -> AsyncIterator[tuple[int, list[int]]]:
    """A server that reads one request per connection and writes the next canned bytes, then
    closes; yields its port and the count of connections it accepted (as a one-item list)."""
    accepted = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answers.pop(0))
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with listener:
        yield listener.sockets[0].getsockname()[1], accepted


def test_an_interim_answer_is_skipped_and_an_answer_framed_by_the_close_is_read_whole_and_not_reused() -> None:
    body = json.dumps(GRANT).encode()
    answers = [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Type: application/json\r\n\r\n" + body,
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    ]

    async def scenario() -> tuple[list[httpx.Response], int]:
        async with answering_raw(answers) as (port, accepted):
            http = LeanHttp(f"http://127.0.0.1:{port}", headers={}, timeout=5)
            got = [await http.request("GET", "/a"), await http.request("GET", "/b")]
            await http.aclose()
            return got, accepted[0]

    (first, second), accepted = run(scenario())

    assert (first.status_code, first.json(), first.headers["content-type"]) == (201, GRANT, "application/json")
    assert (second.status_code, second.json()) == (200, {})
    assert accepted == 2  # neither connection was kept: one ended the body, one was HTTP/1.0


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_an_answer_outside_http_1_1_is_a_protocol_error(answer: bytes) -> None:
    async def scenario() -> None:
        async with answering_raw([answer]) as (port, _):
            http = LeanHttp(f"http://127.0.0.1:{port}", headers={}, timeout=5)
            try:
                await http.request("GET", "/x")
            finally:
                await http.aclose()

    with pytest.raises(httpx.RemoteProtocolError):
        run(scenario())


def test_a_line_break_in_a_header_is_refused_before_anything_is_sent() -> None:
    async def scenario() -> int:
        async with serving(Server(ok())) as server:
            http = LeanHttp(f"http://127.0.0.1:{server.port}", headers={}, timeout=5)
            with pytest.raises(httpx.LocalProtocolError):
                await http.request("GET", "/x", headers={"Idempotency-Key": "k\r\nX-Admin: 1"})
            await http.aclose()
            return len(server.requests)

    assert run(scenario()) == 0
