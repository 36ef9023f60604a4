"""Agents can never decide (contract §10): an agent key on any reviewer endpoint is 403, a
reviewer token on any agent endpoint is 401. The endpoints come from the URL configuration
itself, so a new `api/v1/` endpoint that is neither agent nor reviewer fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient
from rest_framework.views import APIView

from accounts.auth import ApiKeyAuthentication, HasTeamKey
from envelopes.models import AuditEvent, Step
from reviewers.auth import IsReviewer, ReviewerTokenAuthentication
from tests.conftest import AgentClient
from tests.reviewers.conftest import ReviewerClient

pytestmark = pytest.mark.django_db

# Values for each path parameter, so that the request reaches an existing object where it can.
PARAMETERS = {"team": "acme", "ref": "run_7%2Fcharge_1", "tool": "charge_card", "run_id": "run_7", "pk": "1"}


def api_endpoints() -> Iterator[tuple[str, type[APIView]]]:
    def walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, Any]]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern), pattern.callback

    for route, callback in walk(get_resolver().url_patterns, ""):
        if route.startswith("api/v1/"):
            yield route, getattr(callback, "cls", None) or getattr(callback, "view_class", None) or callback


def side(view: Any) -> str:
    if not (isinstance(view, type) and issubclass(view, APIView)):
        return "neither"
    view_instance = view()
    authenticators = {type(a) for a in view_instance.get_authenticators()}
    permissions = {type(p) for p in view_instance.get_permissions()}
    if authenticators == {ApiKeyAuthentication} and HasTeamKey in permissions:
        return "agent"
    if authenticators == {ReviewerTokenAuthentication} and IsReviewer in permissions:
        return "reviewer"
    return "neither"


def concrete(route: str) -> str:
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: PARAMETERS[m.group(1)], route)


def methods(view: type[APIView]) -> list[str]:
    return [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)]


ENDPOINTS = sorted(api_endpoints())


def test_every_api_endpoint_is_an_agent_or_a_reviewer_endpoint() -> None:
    sides = {route: side(view) for route, view in ENDPOINTS}

    assert [route for route, which in sides.items() if which == "neither"] == []
    reviewer = sorted(route for route, which in sides.items() if which == "reviewer")
    assert reviewer == [
        "api/v1/teams/<str:team>/audit",
        "api/v1/teams/<str:team>/away",
        "api/v1/teams/<str:team>/grants",
        "api/v1/teams/<str:team>/grants/<int:pk>",
        "api/v1/teams/<str:team>/queue",
        "api/v1/teams/<str:team>/rules",
        "api/v1/teams/<str:team>/rules/test",
        "api/v1/teams/<str:team>/steps/<path:ref>",
        "api/v1/teams/<str:team>/steps/<path:ref>/decisions",
    ]
    assert len(sides) - len(reviewer) >= 8  # the agent API of §4 and the metrics endpoint


@pytest.mark.parametrize(("route", "view"), ENDPOINTS, ids=[route for route, _ in ENDPOINTS])
def test_the_wrong_credential_is_refused_on_every_method(
    route: str, view: type[APIView], agent: AgentClient, rita_api: ReviewerClient, awaiting: Step
) -> None:
    which = side(view)
    path = concrete(route)
    client = APIClient()
    if which == "reviewer":
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent.raw_key}")
        expected, code = 403, "reviewer_token_required"
    else:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {rita_api.raw_token}")
        expected, code = 401, "authentication_failed"
    version = awaiting.version

    for method in methods(view):
        body = {"action": "approve", "tool": "charge_card", "outcome": "committed"}
        response = getattr(client, method)(path, body, format="json", HTTP_IF_MATCH=f'"{awaiting.pk}.{version}"')
        assert response.status_code == expected, (method, path, response.content)
        assert response.json()["code"] == code

    awaiting.refresh_from_db()
    assert (awaiting.state, awaiting.version) == ("awaiting_approval", version)
    assert not AuditEvent.objects.filter(step=awaiting, kind="decision").exists()
    assert Step.objects.count() == 1  # nothing created under the reviewer token either
