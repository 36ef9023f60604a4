"""A real HTTP receiver on 127.0.0.1 for delivery tests (no traffic ever leaves loopback)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from accounts.models import Team
from webhooks.delivery import SWEEP_SLOT_KEY, sweep_slot_release
from webhooks.models import WebhookEndpoint
from webhooks.outbox import delivery_pending_clear
from webhooks.services import endpoint_create


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class Receiver:
    """Records every request; answers from a script of Answers (then 200)."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: list[Answer] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    answer = receiver.script.pop(0) if receiver.script else Answer()
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hooks/holdpoint") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, *answers: Answer) -> None:
        self.script.extend(answers)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _no_delivery_pending_mark() -> None:
    """An earlier test's "delivery task queued" mark (the cache outlives tests) would keep the
    next event from enqueueing; a slot an interrupted sweep held, its next sweep from running."""
    delivery_pending_clear()
    for number in range(4):
        sweep_slot_release(SWEEP_SLOT_KEY.format(number))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def allow_private(settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True


@pytest.fixture
def endpoint(team: Team, receiver: Receiver, allow_private: None) -> WebhookEndpoint:
    return endpoint_create(team=team, url=receiver.url()).endpoint


@pytest.fixture
def no_prompt_delivery(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the on-commit enqueues instead of reaching a broker."""
    calls: list[int] = []
    monkeypatch.setattr("webhooks.outbox.enqueue_delivery", lambda: calls.append(1))
    return calls


def fake_resolver(mapping: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    """A getaddrinfo that answers names from `mapping` and IP literals as themselves."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host in mapping:
            answers = []
            for address in mapping[host]:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                sockaddr = (address, port, 0, 0) if family == socket.AF_INET6 else (address, port)
                answers.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
            return answers
        return real(host, port, *args, **kwargs)

    return getaddrinfo


class TricklingReceiver:
    """A receiver that answers one byte at a time, `interval` seconds apart, for `duration`
    seconds: no single read ever waits long, yet the answer never ends in time."""

    def __init__(self, *, interval: float = 0.3, duration: float = 60.0) -> None:
        self.interval = interval
        self.duration = duration
        self.connections = 0
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path: str = "/hooks/slow") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"." * 10_000
        started = time.monotonic()
        with conn:
            try:
                conn.recv(65536)  # the request (headers and the small body)
                for byte in answer:
                    if self.closed.is_set() or time.monotonic() - started > self.duration:
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.interval)
            except OSError:
                return  # the client gave up: what the deadline is for

    def close(self) -> None:
        self.closed.set()
        self.listener.close()


@pytest.fixture
def trickling_receiver() -> Iterator[TricklingReceiver]:
    server = TricklingReceiver()
    yield server
    server.close()
