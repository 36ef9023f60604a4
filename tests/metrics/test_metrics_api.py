"""GET /api/v1/tools/{tool}/metrics: the shape of contract §4, the window, auth and errors."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from accounts.models import Team
from accounts.services import api_key_create
from tests.conftest import AgentClient
from tests.metrics.conftest import TOOL, S, U

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"
URL = f"/api/v1/tools/{TOOL}/metrics"


@pytest.fixture
def acme(scenario) -> AgentClient:  # type: ignore[no-untyped-def]
    return AgentClient(api_key_create(team=scenario, name="metrics").raw)


@pytest.fixture
def globex(scenario) -> AgentClient:  # type: ignore[no-untyped-def]
    return AgentClient(api_key_create(team=Team.objects.get(slug="globex"), name="metrics").raw)


def test_it_answers_the_contract_shape_for_the_window(acme) -> None:
    response = acme.get(URL, data={"since": "2026-11-20T10:00:00Z", "until": "2026-11-20T12:00:00+00:00"})
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert list(body) == [
        "tool", "since", "until", "envelopes", "documented_code_share", "unknown_outcomes",
        "resolved_by_verification", "duplicate_writes_prevented", "pending_recovery_seconds",
        "terminal_escalations", "approvals", "attempts_per_step", "attempt_budget_exhausted",
        "redactions", "suspicious_text", "policy",
    ]
    assert list(body["approvals"]) == ["requested", "approved", "rejected", "expired", "latency_seconds", "by"]
    assert (body["since"], body["until"]) == ("2026-11-20T10:00:00Z", "2026-11-20T12:00:00Z")
    assert body["envelopes"]["total"] == 14
    assert body["unknown_outcomes"] == 3
    assert body["approvals"]["latency_seconds"] == {"p50": 250.0, "p95": 500.0}
    assert isinstance(body["attempts_per_step"], float)


def test_the_window_defaults_to_the_last_24_hours(acme) -> None:
    with time_machine.travel(U + timedelta(hours=1), tick=False):
        body = acme.get(URL).json()
    assert (body["since"], body["until"]) == ("2026-11-19T13:00:00Z", "2026-11-20T13:00:00Z")
    assert body["envelopes"]["total"] == 18  # everything, P at U included


def test_since_alone_runs_until_now_and_until_alone_looks_back_24_hours(acme) -> None:
    with time_machine.travel(U, tick=False):
        body = acme.get(URL, data={"since": "2026-11-20T11:00:00Z"}).json()
    assert (body["since"], body["until"]) == ("2026-11-20T11:00:00Z", "2026-11-20T12:00:00Z")
    body = acme.get(URL, data={"until": "2026-11-20T10:00:00Z"}).json()
    assert (body["since"], body["until"]) == ("2026-11-19T10:00:00Z", "2026-11-20T10:00:00Z")
    assert body["envelopes"]["total"] == 3  # Q, R, N


def test_an_offset_other_than_utc_and_an_unencoded_plus_are_understood(acme) -> None:
    body = acme.get(URL + "?since=2026-11-20T11:00:00+01:00&until=2026-11-20T13:00:00%2B01:00").json()
    assert (body["since"], body["until"]) == ("2026-11-20T10:00:00Z", "2026-11-20T12:00:00Z")
    assert body["envelopes"]["total"] == 14


@pytest.mark.parametrize(
    ("query", "field", "rule"),
    [
        ({"since": "yesterday"}, "since", "format"),
        ({"since": "2026-11-20T10:00:00"}, "since", "format"),  # no offset
        ({"until": "2026-11-20"}, "until", "format"),
        ({"since": "2026-11-20T12:00:00Z", "until": "2026-11-20T12:00:00Z"}, "until", "after_since"),
        ({"since": "2026-11-20T13:00:00Z", "until": "2026-11-20T12:00:00Z"}, "until", "after_since"),
        ({"since": "2026-08-21T11:59:59Z", "until": "2026-11-20T12:00:00Z"}, "since", "max_window"),
        ({"window": "24h"}, "window", "additionalProperties"),
        # Out of datetime's range once in UTC, or once the default window is taken off.
        ({"until": "9999-12-31T23:59:59-23:59"}, "until", "format"),
        ({"since": "0001-01-01T00:00:00+23:59"}, "since", "format"),
        ({"until": "0001-01-01T12:00:00Z"}, "until", "format"),
        ({"until": "2026-11-20T12:00:00\u0000Z"}, "until", "null_characters_not_allowed"),
    ],
)
def test_a_bad_window_is_422_naming_the_field(acme, query, field, rule) -> None:
    response = acme.get(URL, data=query)
    assert response.status_code == 422
    assert response["Content-Type"].startswith(PROBLEM)
    body = response.json()
    assert body["code"] == "schema_invalid"
    assert {"field": field, "rule": rule} in body["errors"]


def test_a_window_of_exactly_90_days_is_allowed(acme) -> None:
    response = acme.get(URL, data={"since": "2026-08-22T12:00:00Z", "until": "2026-11-20T12:00:00Z"})
    assert response.status_code == 200


def test_another_teams_tool_is_404_even_with_the_same_name(acme, globex) -> None:
    # globex has its own create_invoice: it sees only its own envelope.
    assert globex.get(URL, data={"since": S.isoformat(), "until": U.isoformat()}).json()["envelopes"]["total"] == 1
    response = acme.get("/api/v1/tools/send_email/metrics")
    assert response.status_code == 200
    for path in ("/api/v1/tools/no_such_tool/metrics", "/api/v1/tools/BAD%00NAME/metrics"):
        response = acme.get(path)
        assert response.status_code == 404
        assert response["Content-Type"].startswith(PROBLEM)
        assert response.json()["code"] == "not_found"


def test_a_tool_only_another_team_has_is_404(scenario) -> None:
    from accounts.services import team_create

    stranger = AgentClient(api_key_create(team=team_create(slug="initech"), name="k").raw)
    response = stranger.get(URL)
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_no_key_or_a_bad_key_is_401(scenario, client) -> None:
    response = client.get(URL)
    assert response.status_code == 401
    assert response["Content-Type"].startswith(PROBLEM)
    response = client.get(URL, HTTP_AUTHORIZATION="Bearer hp_not_a_key")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"


def test_other_methods_are_405(acme) -> None:
    response = acme.post(URL, {})
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_the_openapi_document_describes_the_metrics_answer(client) -> None:
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = document["paths"]["/api/v1/tools/{tool}/metrics"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"tool", "since", "until"}
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer["required"][:3] == ["tool", "since", "until"]
    assert answer["properties"]["approvals"]["properties"]["latency_seconds"]["required"] == ["p50", "p95"]
    assert "422" in operation["responses"]
