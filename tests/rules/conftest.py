"""Rules fixtures: members of each role with reviewer tokens, an API client for the rules API,
and a team's history of granted attempts (through the agent API, as agents make it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from accounts.models import Team
from envelopes.proposal import input_fingerprint
from reviewers.services import reviewer_token_create
from tests.conftest import AgentClient

BIG_REFUNDS = {
    "name": "big-refunds",
    "description": "Refunds over 500 EUR need a human",
    "tools": ["issue_refund"],
    "when": "has(input.amount_cents) && input.amount_cents > 50000",
    "effect": "require_approval",
}
NO_PROD_DROPS = {"name": "no-prod-drops", "tools": ["drop_table"], "when": 'input.env == "prod"', "effect": "deny"}


class RulesClient:
    """The rules API as a token holder calls it."""

    def __init__(self, raw: str, team: str = "acme") -> None:
        self.raw = raw
        self.team = team
        self.http = APIClient()
        self.http.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    def path(self, tail: str = "rules") -> str:
        return f"/api/v1/teams/{self.team}/{tail}"

    def rules(self, **headers: str):  # type: ignore[no-untyped-def]
        return self.http.get(self.path(), **headers)

    def etag(self) -> str:
        response = self.rules()
        assert response.status_code == 200, response.content
        return response["ETag"]

    def put(self, body: Any, *, etag: str | None = None, **headers: str):  # type: ignore[no-untyped-def]
        if etag is not None:
            headers["HTTP_IF_MATCH"] = etag
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.http.generic("PUT", self.path(), data, content_type="application/json", **headers)

    def replace(self, rules: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
        return self.put({"rules": rules}, etag=self.etag())

    def test(self, body: Any):  # type: ignore[no-untyped-def]
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.http.generic("POST", self.path("rules/test"), data, content_type="application/json")

    def grants(self, **params: Any):  # type: ignore[no-untyped-def]
        return self.http.get(self.path("grants"), params)

    def grant(self, body: Any):  # type: ignore[no-untyped-def]
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.http.generic("POST", self.path("grants"), data, content_type="application/json")

    def revoke(self, grant_id: int):  # type: ignore[no-untyped-def]
        return self.http.delete(self.path(f"grants/{grant_id}"))


@pytest.fixture
def member_api(make_reviewer: Callable[..., Any]) -> Callable[..., RulesClient]:
    cache.clear()  # the throttle's counts of an earlier test
    def make(username: str, role: str, in_team: Team | None = None) -> RulesClient:
        user = make_reviewer(username, role, in_team=in_team)
        team = in_team.slug if in_team else "acme"
        return RulesClient(reviewer_token_create(user=user, name="rules").raw, team=team)

    return make


@pytest.fixture
def admin_api(member_api: Callable[..., RulesClient]) -> RulesClient:
    return member_api("ada", "admin")


@pytest.fixture
def viewer_api(member_api: Callable[..., RulesClient]) -> RulesClient:
    return member_api("vic", "viewer")


def attempt(agent: AgentClient, ref: str, tool: str, payload: dict[str, Any], **extra: Any) -> Any:
    """A granted attempt with its input, as an agent asks the gate before a write."""
    response = agent.attempt(ref, tool=tool, fingerprint=input_fingerprint(payload), input=payload, **extra)
    assert response.status_code == 201, response.content
    return response


@pytest.fixture
def refund_history(agent: AgentClient) -> list[str]:
    """Six refunds granted before any rule: three over 500 EUR, three under."""
    refs = []
    for number, cents in enumerate([1200, 90000, 3000, 75000, 51000, 100]):
        ref = f"run_1/refund_{number}"
        attempt(agent, ref, "issue_refund", {"order": f"ord_{number}", "amount_cents": cents})
        refs.append(ref)
    return refs
