"""Reviewer API fixtures: held steps, reviewers of each role, and API clients with their tokens."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from accounts.models import Team
from envelopes.models import Step
from reviewers.services import reviewer_token_create
from tests.approvals import conftest as dashboard
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient

# The dashboard's reviewers and held steps, the same people and steps on both doors (pytest
# registers the fixtures a conftest holds, wherever they were written).
reviewer = dashboard.reviewer
second_reviewer = dashboard.second_reviewer
viewer = dashboard.viewer
awaiting = dashboard.awaiting
verifying = dashboard.verifying


class ReviewerClient:
    """The reviewer API as a token holder calls it."""

    def __init__(self, raw_token: str, team: str = "acme") -> None:
        self.raw_token = raw_token
        self.team = team
        self.http = APIClient()
        self.http.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_token}")

    def queue(self, kind: str | None = None, **params: Any):  # type: ignore[no-untyped-def]
        query = {**({"kind": kind} if kind else {}), **params}
        return self.http.get(f"/api/v1/teams/{self.team}/queue", query)

    def step(self, ref: str, **headers: str):  # type: ignore[no-untyped-def]
        return self.http.get(f"/api/v1/teams/{self.team}/steps/{quote(ref, safe='')}", **headers)

    def etag(self, ref: str) -> str:
        response = self.step(ref)
        assert response.status_code == 200, response.content
        return response["ETag"]

    def decide(self, ref: str, body: Any, *, etag: str | None = None, **headers: str):  # type: ignore[no-untyped-def]
        if etag is not None:
            headers["HTTP_IF_MATCH"] = etag
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.http.generic(
            "POST",
            f"/api/v1/teams/{self.team}/steps/{quote(ref, safe='')}/decisions",
            data,
            content_type="application/json",
            **headers,
        )


def token_for(user: Any, team: str = "acme", **kwargs: Any) -> ReviewerClient:
    return ReviewerClient(reviewer_token_create(user=user, name="cli", **kwargs).raw, team=team)


@pytest.fixture(autouse=True)
def _fresh_throttle_counts() -> None:
    cache.clear()


@pytest.fixture
def rita_api(reviewer: Any) -> ReviewerClient:
    return token_for(reviewer)


@pytest.fixture
def other_awaiting(other_agent: AgentClient, other_team: Team) -> Step:
    """A held step of another team, under the same operation_ref as `awaiting`."""
    return post_envelope(other_agent, approval_envelope(operation_ref="run_7/charge_1"))
