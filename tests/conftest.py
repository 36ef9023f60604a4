"""Shared fixtures: a team with an API key, an API client that speaks for it, reviewers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import Team
from accounts.services import api_key_create, reviewer_create, team_create

PASSWORD = "correct-horse-battery"


@pytest.fixture(autouse=True)
def _plain_http(settings) -> None:  # type: ignore[no-untyped-def]
    """The test client and the live server speak plain HTTP; without DEBUG the settings default
    to HTTPS only (a redirect, secure-only cookies)."""
    settings.SECURE_SSL_REDIRECT = False
    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False
    # Reviewers are created for nearly every dashboard test; a slow hash only slows the suite.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _outages_forgotten() -> None:
    """A test that made Redis or the broker fail must not make the next one skip them, or keep
    it from warning: each process remembers an outage for a few seconds, and warns of one once a
    minute (config.cache, config.celery)."""
    from config import cache as config_cache
    from config import celery as config_celery
    from limits import throttle

    config_cache._redis_down_until.clear()
    config_celery._broker_down_until[0] = 0.0
    config_celery._last_warning[0] = 0.0
    throttle._redis_down_until = 0.0


@pytest.fixture(autouse=True)
def _receipt_key_forgotten() -> None:
    """Each test's database has receipt keys of its own: the process reads the signing key again
    (it keeps it for a minute, evidence.keys.KEY_TTL)."""
    from evidence.keys import forget_signing_key

    forget_signing_key()


@pytest.fixture
def team(db) -> Team:  # type: ignore[no-untyped-def]
    return team_create(slug="acme")


@pytest.fixture
def other_team(db) -> Team:  # type: ignore[no-untyped-def]
    return team_create(slug="globex")


class AgentClient:
    """An API client bound to one team's key, with helpers for the agent's calls."""

    def __init__(self, raw_key: str) -> None:
        self.raw_key = raw_key
        self.http = APIClient()
        self.http.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")

    def post(self, path: str, body: Any, *, content_type: str = "application/json", **headers: str):  # type: ignore[no-untyped-def]
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.http.generic("POST", path, data, content_type=content_type, **headers)

    def get(self, path: str, data: Any = None, **kwargs: Any):  # type: ignore[no-untyped-def]
        return self.http.get(path, data, **kwargs)

    def envelope(self, body: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        return self.post("/api/v1/envelopes", body, **kwargs)

    def attempt(self, ref: str, *, tool: str, fingerprint: str, **extra: Any):  # type: ignore[no-untyped-def]
        from urllib.parse import quote

        headers = extra.pop("headers", {})
        return self.post(
            f"/api/v1/steps/{quote(ref, safe='')}/attempts",
            {"tool": tool, "input_fingerprint": fingerprint, **extra},
            **headers,
        )

    def verify(self, ref: str, outcome: str, **extra: Any):  # type: ignore[no-untyped-def]
        from urllib.parse import quote

        return self.post(
            f"/api/v1/steps/{quote(ref, safe='')}/verification",
            {"outcome": outcome, "checked_at": "2026-11-29T12:00:00Z", **extra},
        )

    def step(self, ref: str, **kwargs: Any):  # type: ignore[no-untyped-def]
        from urllib.parse import quote

        return self.get(f"/api/v1/steps/{quote(ref, safe='')}", **kwargs)


def logged_in(user: Any) -> Client:
    """A dashboard client with `user` logged in."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def agent(team: Team) -> AgentClient:
    cache.clear()  # throttle counts from an earlier test
    return AgentClient(api_key_create(team=team, name="agent").raw)


@pytest.fixture
def other_agent(other_team: Team) -> AgentClient:
    return AgentClient(api_key_create(team=other_team, name="agent").raw)


@pytest.fixture
def make_reviewer(team: Team) -> Callable[..., Any]:
    def make(username: str = "rita", role: str = "reviewer", in_team: Team | None = None):  # type: ignore[no-untyped-def]
        return reviewer_create(username=username, password=PASSWORD, team=in_team or team, role=role)

    return make


def fingerprint(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def error_envelope(**overrides: Any) -> dict[str, Any]:
    """A valid canonical error envelope (seed 000's invalid address), changed by overrides."""
    body: dict[str, Any] = {
        "ok": False,
        "tool": "send_email",
        "operation_ref": "run_81/step_4",
        "code": "INVALID_RECIPIENT_ADDRESS",
        "category": "validation",
        "commit_state": "not_committed",
        "retry": {"directive": "after_input_fix", "max_attempts_remaining": 1},
        "next_action": "correct_input",
        "safe_details": {"field": "recipient_email"},
        "agent_message": "recipient_email is invalid; request a corrected address.",
        "user_message": "I need a valid recipient address before I can send this.",
    }
    body.update(overrides)
    return body


def unknown_outcome(**overrides: Any) -> dict[str, Any]:
    """Seed 000's write socket timeout: the outcome is unknown, verify before any write."""
    fields: dict[str, Any] = {
        "code": "OUTCOME_UNKNOWN",
        "category": "dependency",
        "commit_state": "unknown",
        "retry": {"directive": "never", "max_attempts_remaining": 0},
        "next_action": "verify_operation",
        "safe_details": {"verification_tool": "get_invoice_by_operation_ref"},
    }
    fields.update(overrides)
    return error_envelope(**fields)


def success_envelope(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ok": True,
        "tool": "send_email",
        "operation_ref": "run_81/step_4",
        "commit_state": "committed",
    }
    body.update(overrides)
    return body


@pytest.fixture
def openapi_document(client: Client) -> dict[str, Any]:
    """The served OpenAPI document, checked to be valid OpenAPI 3 first."""
    from openapi_spec_validator import validate

    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    validate(document)
    return document
