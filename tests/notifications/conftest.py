"""Fixtures for notifications: real receivers (an SMTP server, an HTTP receiver that checks
what Slack documents for incoming webhooks), channels, and steps held through the API."""

from __future__ import annotations

import io
import json
import socket
import threading
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from envelopes.models import Step
from tests.conftest import AgentClient, error_envelope
from tests.webhooks.conftest import Receiver, trickling_receiver  # noqa: F401 (a fixture, for Slack's deadline)

# Block types a Slack message may carry (https://docs.slack.dev/reference/block-kit/blocks).
SLACK_BLOCK_TYPES = {"actions", "context", "divider", "header", "image", "input", "rich_text", "section", "file"}


def approval_envelope(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "code": "AMOUNT_OVER_LIMIT",
        "category": "authorization",
        "commit_state": "not_committed",
        "retry": {"directive": "never", "max_attempts_remaining": 0},
        "next_action": "request_approval",
        "safe_details": {"limit": "1000", "field": "amount"},
        "tool": "charge_card",
        "operation_ref": "run_1/charge",
    }
    body.update(overrides)
    return error_envelope(**body)


def outage_envelope(**overrides: Any) -> dict[str, Any]:
    """A service-wide failure whose outcome is unknown: the step escalates, the tool halts."""
    body: dict[str, Any] = {
        "code": "UPSTREAM_UNAVAILABLE",
        "category": "dependency",
        "commit_state": "unknown",
        "retry": {"directive": "never", "max_attempts_remaining": 0},
        "next_action": "escalate",
        "scope": "service",
        "tool": "charge_card",
        "safe_details": {},
    }
    body.update(overrides)
    return error_envelope(**body)


def hold(agent: AgentClient, ref: str = "run_1/charge", **overrides: Any) -> Step:
    response = agent.envelope(approval_envelope(operation_ref=ref, **overrides))
    assert response.status_code == 201, response.content
    return Step.objects.get(team__slug="acme", operation_ref=ref)


REFUND_INPUT: dict[str, Any] = {"amount": 1250, "currency": "EUR", "customer": "cus_9", "payee": "acct_shop_1"}


def hold_proposing(agent: AgentClient, ref: str, value: dict[str, Any] | None = None, **overrides: Any) -> Step:
    """A step held for approval after the gate granted an attempt with `value` (the proposal)."""
    from envelopes.proposal import input_fingerprint

    value = REFUND_INPUT if value is None else value
    tool = overrides.get("tool", "charge_card")
    answer = agent.attempt(ref, tool=tool, fingerprint=input_fingerprint(value), input=value)
    assert answer.status_code == 201, answer.content
    return hold(agent, ref, **overrides)


def expected_mac(*, team: str, operation_ref: str, etag: str, fingerprint: str, secret: str | None = None) -> str:
    """The Approve value's MAC, computed here with hashlib and hmac as Django's salted_hmac
    defines it (key: SHA-256 of purpose + SECRET_KEY), independently of notifications."""
    import hashlib
    import hmac

    from django.conf import settings

    key = hashlib.sha256(f"holdpoint.notifications.slack-approve.v1{secret or settings.SECRET_KEY}".encode()).digest()
    message = json.dumps([team, operation_ref, etag, fingerprint], separators=(",", ":"))
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


@pytest.fixture
def allow_private(settings: Any) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True


@pytest.fixture
def no_enqueue(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the on-commit enqueues instead of reaching a broker (tests run the sweep)."""
    calls: list[int] = []
    monkeypatch.setattr("notifications.consumer.enqueue_notify", lambda: calls.append(1))
    monkeypatch.setattr("webhooks.outbox.enqueue_delivery", lambda: None)
    return calls


def slack_refusal(body: bytes) -> str | None:
    """What Slack's incoming webhooks would answer 400 to, in its own words, or None: a JSON
    object with a non-empty string `text` and at most 50 `blocks`, each a known block type
    whose text objects are `plain_text` or `mrkdwn` with string text."""
    try:
        payload = json.loads(body)
    except ValueError:
        return "invalid_payload"
    if not isinstance(payload, dict) or not isinstance(payload.get("text"), str) or not payload["text"]:
        return "no_text"
    blocks = payload.get("blocks", [])
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "invalid_blocks"
    for block in blocks:
        if not isinstance(block, dict) or block.get("type") not in SLACK_BLOCK_TYPES:
            return "invalid_blocks"
        texts = [block["text"]] if isinstance(block.get("text"), dict) else []
        texts += [e for e in block.get("elements", []) + block.get("fields", []) if e.get("type") != "button"]
        for text in texts:
            if text.get("type") not in ("plain_text", "mrkdwn") or not isinstance(text.get("text"), str):
                return "invalid_blocks"
    return None


class SlackReceiver(Receiver):
    """A local HTTP receiver that answers like Slack's incoming webhooks: 400 with Slack's error
    word for a body Slack refuses (`slack_refusal`), else 200 "ok" (or the scripted answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.server.RequestHandlerClass = self._checking(self.server.RequestHandlerClass)

    def _checking(self, handler: Any) -> Any:
        receiver = self

        class Checking(handler):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                refusal = slack_refusal(body)
                if refusal is None:
                    self.rfile = io.BytesIO(body)  # the recording handler reads it again
                    return super().do_POST()
                receiver.refused.append(refusal)
                self.send_response(400)
                self.send_header("Content-Length", str(len(refusal)))
                self.end_headers()
                self.wfile.write(refusal.encode())
                return None

        return Checking

    @property
    def refused(self) -> list[str]:
        if not hasattr(self, "_refused"):
            self._refused: list[str] = []
        return self._refused

    def payloads(self) -> list[dict[str, Any]]:
        return [json.loads(request.body) for request in self.received]

    def check(self) -> None:
        """Every body was one Slack accepts."""
        assert self.refused == []
        assert all(slack_refusal(request.body) is None for request in self.received)


@pytest.fixture
def slack() -> Iterator[SlackReceiver]:
    server = SlackReceiver()
    yield server
    server.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


class Inbox:
    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.envelopes: list[Any] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.envelopes.append(envelope)
            self.messages.append(message_from_bytes(envelope.original_content, policy=policy.default))  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def smtp(settings: Any) -> Iterator[Inbox]:
    """A real SMTP server (aiosmtpd) on a free port, and Django's SMTP backend pointed at it."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    yield inbox
    controller.stop()
