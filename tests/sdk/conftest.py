"""SDK tests talk to an in-process fake of the API through httpx.MockTransport: no Django
database, no network; the live tests (test_live.py, test_example_agent.py,
test_reviewer_cli_live.py) drive a real server, `live_server` below."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.test.utils import override_settings
from holdpoint_sdk import AsyncHoldpoint, Holdpoint
from pytest_django.live_server_helper import LiveServer

BASE = "https://holdpoint.test"
KEY = "hp_test_key"


@pytest.fixture(autouse=True)
def _receipt_keys_forgotten() -> None:
    """Each test's live Holdpoint may sign with a key of its own: the SDK reads the keys again."""
    from holdpoint_sdk.receipts import forget_keys

    forget_keys()


@pytest.fixture(scope="session")
def live_server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """pytest-django's live server, built while the HTTPS redirect is off: SecurityMiddleware
    reads SECURE_SSL_REDIRECT once, when the server thread builds its handler."""
    address = request.config.getvalue("liveserver") or "localhost"
    with override_settings(SECURE_SSL_REDIRECT=False, SECURE_HSTS_SECONDS=0):
        server = LiveServer(address)
    yield server
    server.stop()


def directive(action: str = "proceed", *, not_before: str | None = None, reason: str = "") -> dict:
    return {
        "action": action,
        "may_write": action == "proceed",
        "not_before": not_before,
        "reason": reason or {"proceed": "attempt_granted", "stop": "committed"}.get(action, action),
    }


def step(state: str = "in_progress", action: str = "proceed", **overrides: Any) -> dict[str, Any]:
    body = {
        "operation_ref": "run_81/step_4",
        "tool": "create_invoice",
        "state": state,
        "held": state not in ("in_progress", "retry_ready", "succeeded", "cancelled", "failed"),
        "reason": "attempt_granted",
        "correlation_id": None,
        "run_id": None,
        "attempts": 1,
        "max_attempts": 3,
        "not_before": None,
        "deadline": None,
        "directive": directive(action, not_before=overrides.pop("not_before", None)),
        "last_envelope": None,
        "decisions": [],
        "created_at": "2026-11-29T12:00:00Z",
        "updated_at": "2026-11-29T12:00:00Z",
        "url": "https://holdpoint.test/steps/1/",
    }
    body.update(overrides)
    return body


def problem(status: int, code: str, **extra: Any) -> httpx.Response:
    body = {"type": f"https://holdpoint.dev/problems/{code}", "title": code, "status": status,
            "detail": f"{code} happened", "code": code, **extra}  # fmt: skip
    headers = {"Content-Type": "application/problem+json"}
    if "retry_after" in extra:
        headers["Retry-After"] = str(body.pop("retry_after"))
    return httpx.Response(status, json=body, headers=headers)


# The state an envelope's next_action leads to (contract §3), for the fake's answers.
AFTER_ENVELOPE = {
    "correct_input": ("needs_input", "fix_input"),
    "wait_and_retry": ("waiting_retry", "wait"),
    "verify_operation": ("verifying", "verify"),
    "request_approval": ("awaiting_approval", "hold"),
    "escalate": ("escalated", "hold"),
    "abort": ("failed", "stop"),
}


@dataclass
class FakeApi:
    """Records requests; answers by route, from scripted responses or sensible defaults."""

    requests: list[httpx.Request] = field(default_factory=list)
    scripted: dict[str, list[httpx.Response | Exception]] = field(default_factory=dict)
    handlers: dict[str, Callable[[httpx.Request], httpx.Response]] = field(default_factory=dict)

    def script(self, route: str, *answers: httpx.Response | Exception) -> None:
        self.scripted.setdefault(route, []).extend(answers)

    @staticmethod
    def route(request: httpx.Request) -> str:
        path = request.url.raw_path.decode().split("?")[0]
        if path.endswith("/attempts"):
            return "attempts"
        if path.endswith("/verification"):
            return "verification"
        if path == "/api/v1/envelopes":
            return "envelopes"
        if path.startswith("/api/v1/steps/"):
            return "step"
        if path == "/api/v1/steps":
            return "steps"
        return path

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        route = self.route(request)
        if self.scripted.get(route):
            answer = self.scripted[route].pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        if route in self.handlers:
            return self.handlers[route](request)
        if route == "attempts":
            return httpx.Response(201, json={"attempt": 1, "step": step(), "directive": directive()})
        if route == "envelopes":
            envelope = json.loads(request.content)
            if envelope["ok"]:
                answered = step("succeeded", "stop", reason="committed")
            else:
                state, action = AFTER_ENVELOPE[envelope["next_action"]]
                answered = step(state, action, not_before=envelope["retry"].get("not_before"))
            return httpx.Response(
                201,
                json={"envelope_id": len(self.requests), "correlation_id": "c-1", "step": answered,
                      "directive": answered["directive"], "dropped_detail_keys": [], "flags": []},
            )  # fmt: skip
        if route == "step":
            return httpx.Response(200, json=step(), headers={"ETag": '"1.1"'})
        return httpx.Response(404, json={"code": "not_found", "status": 404})

    def of(self, route: str) -> list[httpx.Request]:
        return [r for r in self.requests if self.route(r) == route]

    def bodies(self, route: str) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.of(route)]


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def hp(api: FakeApi, sleeps: list[float]) -> Holdpoint:
    return Holdpoint(BASE, KEY, transport=httpx.MockTransport(api), sleep=sleeps.append)


@pytest.fixture
def ahp(api: FakeApi, sleeps: list[float]) -> AsyncHoldpoint:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return AsyncHoldpoint(BASE, KEY, transport=httpx.MockTransport(api), sleep=sleep)
