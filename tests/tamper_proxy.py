"""A man in the middle between an agent (the SDK, holdpoint-mcp) and a live Holdpoint: it
forwards every request and, when told to, alters the approval in the attempt gate's grants, so
tests can show that the agent refuses what no reviewer approved (contract §13)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

Mutation = Callable[[dict[str, Any]], None]  # alters the latest approval of a grant's step, in place


class TamperProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.mutate: Mutation | None = None
        self.only_ref: str | None = None  # alter only the grants of this step
        self.altered = 0
        self.paths: list[str] = []
        # Requests to swallow (method, path prefix): held until `released` is set, then answered
        # 503 without reaching Holdpoint, as a report lost with the process that sent it.
        self.swallow: tuple[str, str] | None = None
        self.swallowed: list[bytes] = []
        self.released = threading.Event()

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        self.paths.append(path)
        if self.swallow is not None and method == self.swallow[0] and path.startswith(self.swallow[1]):
            self.swallowed.append(body)
            self.released.wait(120)
            return 503, [("Content-Type", "text/plain")], b"swallowed"
        forwarded = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length", "connection")}
        response = httpx.request(method, self.upstream + path, headers=forwarded, content=body, timeout=30)
        content = response.content
        if self.mutate is not None and method == "POST" and path.endswith("/attempts") and response.status_code == 201:
            grant = json.loads(content)
            step = grant["step"]
            approvals = [d for d in step.get("decisions", []) if d["action"] == "approve"]
            if approvals and (self.only_ref is None or step["operation_ref"] == self.only_ref):
                self.mutate(approvals[-1])
                self.altered += 1
                content = json.dumps(grant).encode()
        kept = [(k, v) for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding",
                "connection", "content-encoding")]  # fmt: skip
        return response.status_code, kept, content


@contextmanager
def tamper_proxy(upstream: str) -> Iterator[tuple[TamperProxy, str]]:
    proxy = TamperProxy(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            status, headers, content = proxy.answer(self.command, self.path, dict(self.headers.items()), body)
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_DELETE = _relay

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --- what a tampering proxy does to a receipt ----------------------------------------------------


def resign(seed: bytes, **changes: Any) -> Mutation:
    """Replace the receipt by one signed with the server's own key (a genuine receipt of another
    decision, as a replay would bring) whose claims differ by `changes`."""

    def mutate(decision: dict[str, Any]) -> None:
        header = jwt.get_unverified_header(decision["receipt"])
        claims = jwt.decode(decision["receipt"], options={"verify_signature": False})
        claims.update(changes)
        decision["receipt"] = jwt.encode(
            claims, Ed25519PrivateKey.from_private_bytes(seed), algorithm="EdDSA", headers={"kid": header["kid"]}
        )

    return mutate


def flip_signature(decision: dict[str, Any]) -> None:
    head, payload, signature = decision["receipt"].split(".")
    decision["receipt"] = f"{head}.{payload}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"


def edit_payload(decision: dict[str, Any]) -> None:
    """Change a claim in the payload and keep the signature: what an attacker without the key can do."""
    head, _, signature = decision["receipt"].split(".")
    claims = jwt.decode(decision["receipt"], options={"verify_signature": False})
    claims["input_fingerprint"] = "0" * 64
    payload = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    decision["receipt"] = f"{head}.{payload}.{signature}"


def drop_receipt(decision: dict[str, Any]) -> None:
    decision["receipt"] = None


def foreign_key(kid: str | None) -> Mutation:
    """Sign with a key the server never had, under its kid (`kid` None) or another one."""

    def mutate(decision: dict[str, Any]) -> None:
        header = jwt.get_unverified_header(decision["receipt"])
        claims = jwt.decode(decision["receipt"], options={"verify_signature": False})
        decision["receipt"] = jwt.encode(
            claims, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": kid or header["kid"]}
        )

    return mutate
