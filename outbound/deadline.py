"""A hard wall-clock deadline for each outbound try (a webhook, a Slack or webhook notification).

httpx's timeouts bound each network operation, not the request: a receiver that sends one
byte every few seconds never trips a 10 s read timeout and holds the try (and the worker slot
it runs in) for as long as it likes. The sending client's transport therefore runs on a
network backend that gives every connect, TLS handshake, read and write only the time left
before the try's deadline, and fails the operation as a timeout once it has passed. The
deadline is set around a try with `try_deadline(seconds)`; outside one, the backend behaves
like httpcore's own.
"""

from __future__ import annotations

import contextlib
import ssl
import time
import typing
from collections.abc import Iterator
from contextvars import ContextVar

import httpcore
import httpx

_deadline: ContextVar[float | None] = ContextVar("webhook_try_deadline", default=None)


@contextlib.contextmanager
def try_deadline(seconds: float) -> Iterator[None]:
    """Everything the sending transport does inside this block ends within `seconds`."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline_passed() -> bool:
    deadline = _deadline.get()
    return deadline is not None and time.monotonic() >= deadline


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    """The operation's own timeout, cut to the time left before the deadline."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the try's deadline has passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(
            self._backend.connect_tcp(
                host, port, timeout=bounded, local_address=local_address, socket_options=socket_options
            )
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._backend.connect_unix_socket(path, timeout=bounded, socket_options=socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def deadline_transport() -> httpx.HTTPTransport:
    """httpx's transport on the deadline backend: no proxy from the environment, no kept-alive
    connection (see outbound.http.sending_client). httpx takes no network backend, so its pool is
    replaced by an identical one that has it (tests/webhooks/test_deadline.py holds this to
    a receiver that trickles bytes)."""
    ssl_context = httpx.create_ssl_context(trust_env=False)  # built once (loading the CA bundle is slow), shared
    limits = httpx.Limits(max_keepalive_connections=0)
    transport = httpx.HTTPTransport(verify=ssl_context, trust_env=False, limits=limits)
    transport._pool = httpcore.ConnectionPool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=DeadlineBackend(),
    )
    return transport
