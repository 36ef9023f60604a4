"""A lean HTTP/1.1 client for the proxy's requests to Holdpoint: kept-alive connections, the
protocol written and read here, asyncio streams for the I/O.

Why not httpx here: every guarded tools/call makes two requests (the attempt gate and the
envelope) on the critical path of the agent's tool call, and httpx's AsyncClient spends more
CPU per request in its own layers (URL merging, request building, anyio cancel scopes, sniffio
look-ups) than the rest of the request; h11, for the protocol alone, validates every header of
both sides through its event and state machine. Writing the request line and headers as one
string and reading the answer with `readuntil`/`readexactly` puts the same bytes on the wire
for a fraction of either (bench/mcp_proxy_latency.py --stub measures it; the figures:
bench/README.md, "figures behind comments"). The answer is
read as RFC 9112 frames it (1xx skipped; no body for HEAD, 204, 304; chunked; Content-Length;
else up to the close, and such a connection is not reused) and anything else is a
RemoteProtocolError; a CR or LF in the request line or a header is refused before sending. It
implements only what `AsyncHoldpoint` uses of `httpx.AsyncClient` (`request` and `aclose`) and
answers with real `httpx.Response` objects and httpx's exceptions, so the SDK's retry rules and
error mapping apply unchanged.

What it does not do, and so when `lean_http_for` returns None and the proxy keeps httpx: a proxy
from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, unless NO_PROXY exempts the host), a
scheme other than http/https, and anything but asyncio.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.request
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

import httpx

from ..async_client import AsyncHoldpoint

MAX_IDLE = 8  # kept-alive connections waiting for the next request
ADDRESS_TTL_S = 60.0  # how long a host name's address is reused without looking it up again
READ_CHUNK = 64 * 1024


def _request_head(method: str, target: str, headers: list[tuple[str, str]]) -> bytes:
    """The request line and headers; a CR or LF in any of them is refused (header injection)."""
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers) + "\r\n"
    if head.count("\n") != len(headers) + 2 or head.count("\r") != len(headers) + 2:
        raise httpx.LocalProtocolError("a CR or LF in the request line or a header")
    return head.encode("latin-1")


def _parse_head(head: bytes) -> tuple[str, int, list[tuple[str, str]]]:
    """(version, status, headers) of a response head, or RemoteProtocolError."""
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise httpx.RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
        headers.append((name, value.strip(" \t")))
    return parts[0], int(parts[1]), headers


def _tokens(value: str) -> set[str]:
    return {token.strip().lower() for token in value.split(",")}


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise httpx.RemoteProtocolError("a malformed chunk size") from None
        if size < 0:
            raise httpx.RemoteProtocolError("a malformed chunk size")
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, ignored
                pass
            return bytes(body)
        chunk = await reader.readexactly(size + 2)
        if chunk[-2:] != b"\r\n":
            raise httpx.RemoteProtocolError("a chunk without its CRLF")
        body += chunk[:-2]


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False  # has carried a request (so the server may since have closed it)
        self.reusable = False  # the last answer was read whole and the server keeps the connection

    def stale(self) -> bool:
        """An idle connection the server has closed, or that has bytes nobody asked for."""
        unread = getattr(self.reader, "_buffer", b"")  # asyncio keeps what arrived unasked there
        return self.reader.at_eof() or self.writer.is_closing() or bool(unread)

    def close(self) -> None:
        self.writer.close()


class _FirstByteMissing(Exception):
    """A reused connection closed before any byte of the answer: the request may be sent again
    on a new connection when it is safe to repeat."""


class LeanHttp:
    """The part of `httpx.AsyncClient` that `AsyncHoldpoint` uses, on kept-alive connections."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str],
        timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an http(s) URL is needed, got {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        host_header = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host_header if default_port else f"{host_header}:{self.port}"
        self.origin = f"{parts.scheme}://{self.host_header}"
        self.headers = [(name, value) for name, value in headers.items()]
        self.timeout = timeout
        self.ssl = (ssl_context or httpx.create_ssl_context()) if parts.scheme == "https" else None
        self._idle: list[_Connection] = []
        self._address: str | None = None  # the IP address the last new connection reached
        self._address_until = 0.0
        self._closed = False

    # --- connections ------------------------------------------------------------------------

    async def _connect(self) -> _Connection:
        # The address the last connection reached, while it keeps working: a server that closes
        # every connection (gunicorn's sync workers) would otherwise cost a name look-up in a
        # thread, and for `localhost` a refused try of ::1, on every request.
        # Kept a minute at most, so that a moved server is found by its name again.
        if self._address is not None and time.monotonic() < self._address_until:
            try:
                return await self._open(self._address)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                pass
        self._address = None
        connection = await self._open(self.host)
        peer = connection.writer.get_extra_info("peername")
        if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
            self._address, self._address_until = peer[0], time.monotonic() + ADDRESS_TTL_S
        return connection

    async def _open(self, address: str) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    address,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                    limit=READ_CHUNK,
                ),
                self.timeout,
            )
        except TimeoutError as error:
            raise httpx.ConnectTimeout(f"connecting to {self.origin} took over {self.timeout:g}s") from error
        except (OSError, ssl.SSLError) as error:
            raise httpx.ConnectError(f"cannot connect to {self.origin}: {error}") from error
        return _Connection(reader, writer)

    def _checkout(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.stale():
                return connection
            connection.close()
        return None

    def _checkin(self, connection: _Connection) -> None:
        if connection.reusable and not self._closed and len(self._idle) < MAX_IDLE:
            self._idle.append(connection)
            return
        connection.close()

    # --- one exchange -----------------------------------------------------------------------

    def _target(self, url: str, params: Mapping[str, Any] | None) -> str:
        target = self.prefix + url if url.startswith("/") else url
        if params:
            query = urlencode([(key, str(value)) for key, value in params.items() if value is not None])
            if query:
                target += ("&" if "?" in target else "?") + query
        return target

    async def _exchange(
        self, connection: _Connection, method: str, target: str, headers: list[tuple[str, str]], content: bytes
    ) -> httpx.Response:
        reused = connection.used
        connection.used = True
        connection.reusable = False
        try:
            connection.writer.write(_request_head(method, target, headers) + content)  # one write: one segment
            await connection.writer.drain()
        except OSError as error:
            if reused:
                raise _FirstByteMissing from error
            raise httpx.WriteError(f"sending to {self.origin} failed: {error}") from error
        reader = connection.reader
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError as error:
                    if reused and not error.partial:
                        raise _FirstByteMissing from None
                    raise httpx.RemoteProtocolError(f"{self.origin} closed the connection mid-answer") from None
                except OSError as error:
                    if reused:
                        raise _FirstByteMissing from error
                    raise
                reused = False  # a byte of the answer came: never sent again from here
                version, status, response_headers = _parse_head(head)
                if not 100 <= status < 200:
                    break
                if status == 101:
                    raise httpx.RemoteProtocolError(f"{self.origin} switched protocols")
            fields = {name.lower(): value for name, value in response_headers}
            keep_alive = version == "HTTP/1.1" and "close" not in _tokens(fields.get("connection", ""))
            if method == "HEAD" or status in (204, 304):
                body = b""
            elif "chunked" in _tokens(fields.get("transfer-encoding", "")):
                body = await _read_chunked(reader)
            elif "content-length" in fields:
                try:
                    length = int(fields["content-length"])
                except ValueError:
                    raise httpx.RemoteProtocolError(f"{self.origin} sent a bad Content-Length") from None
                if length < 0:
                    raise httpx.RemoteProtocolError(f"{self.origin} sent a bad Content-Length")
                body = await reader.readexactly(length)
            else:
                body, keep_alive = await reader.read(-1), False  # framed by the connection's end
        except asyncio.IncompleteReadError:
            raise httpx.RemoteProtocolError(f"{self.origin} closed the connection mid-answer") from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError(f"{self.origin} sent a header block over {READ_CHUNK} bytes") from None
        except OSError as error:
            raise httpx.ReadError(f"reading from {self.origin} failed: {error}") from error
        connection.reusable = keep_alive
        return httpx.Response(status, headers=response_headers, content=body)

    async def _send_once(
        self, method: str, target: str, headers: list[tuple[str, str]], content: bytes, *, repeatable: bool
    ) -> httpx.Response:
        connection = self._checkout()
        if connection is None:
            connection = await self._connect()
        try:
            response = await self._exchange(connection, method, target, headers, content)
        except _FirstByteMissing:
            connection.close()
            if not repeatable:
                raise httpx.RemoteProtocolError(f"{self.origin} closed a kept-alive connection") from None
            connection = await self._connect()  # the server closed it while idle: once more, anew
            try:
                response = await self._exchange(connection, method, target, headers, content)
            except BaseException:
                connection.close()
                raise
        except BaseException:
            connection.close()
            raise
        self._checkin(connection)
        return response

    # --- the httpx.AsyncClient subset --------------------------------------------------------

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the client has been closed")
        body = content or b""
        all_headers = [("Host", self.host_header), *self.headers, *(headers or {}).items()]
        if body or method in ("POST", "PUT", "PATCH"):
            all_headers.append(("Content-Length", str(len(body))))
        sent = dict((name.lower(), value) for name, value in all_headers)
        repeatable = method in ("GET", "HEAD") or "idempotency-key" in sent
        try:
            # A deadline on the caller's task rather than wait_for's task per request: one task
            # start and one wake-up less on every request.
            target = self._target(url, params)
            async with asyncio.timeout(self.timeout):
                return await self._send_once(method, target, all_headers, body, repeatable=repeatable)
        except TimeoutError as error:
            raise httpx.ReadTimeout(f"no answer from {self.origin} within {self.timeout:g}s") from error

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def lean_http_for(base_url: str, *, headers: Mapping[str, str], timeout: float) -> LeanHttp | None:
    """A LeanHttp for Holdpoint at `base_url`, or None where httpx must stay (see the module)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    proxies = urllib.request.getproxies()
    if (proxies.get(parts.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(parts.hostname):
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    return LeanHttp(base_url, headers=headers, timeout=timeout)


class LeanAsyncHoldpoint(AsyncHoldpoint):
    """`AsyncHoldpoint` whose requests go over `LeanHttp` where it applies (`lean` says whether
    it does); everything else about the client (retries, errors, answers) is the SDK's."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 10.0, **options: Any) -> None:
        super().__init__(base_url, api_key, timeout=timeout, **options)
        lean = None
        if options.get("transport") is None:  # a transport given is the caller's choice: httpx it is
            lean = lean_http_for(self.base_url, headers=self._headers, timeout=timeout)
        self.lean = lean is not None
        if lean is not None:
            # httpx's client was never opened (no connection exists before a request): dropped.
            self._http = cast(httpx.AsyncClient, lean)

    async def __aenter__(self) -> LeanAsyncHoldpoint:
        return self
