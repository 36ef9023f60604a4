"""The reviewer API under generated inputs (schemathesis, from the OpenAPI document): never a
5xx, every error a problem+json with a code, and no step decided without its ETag."""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from accounts.models import Team
from accounts.services import reviewer_create
from envelopes import services
from envelopes.models import Decision, Step
from reviewers.services import reviewer_token_create
from tests.approvals.conftest import approval_envelope

REF = "fuzz/charge_1"

schemathesis.experimental.OPEN_API_3_1.enable()
schema = schemathesis.from_pytest_fixture("api_schema")


@pytest.fixture
def api_schema(db):  # type: ignore[no-untyped-def]
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    from config.wsgi import application

    # Like Django's test client: keep the test's transaction open across WSGI calls.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield schemathesis.from_wsgi("/api/schema/?format=json", application)
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def held_step(team: Team) -> Step:
    """A step awaiting approval, so that generated decisions reach a real held step."""
    found = Step.objects.for_team(team).filter(operation_ref=REF).first()
    if found is not None:
        return found
    body = approval_envelope(operation_ref=REF)
    services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode())
    return Step.objects.for_team(team).get(operation_ref=REF)


@schema.include(path_regex="^/api/v1/teams/").parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@pytest.mark.django_db
def test_the_reviewer_api_never_answers_5xx_or_a_non_problem_error(case: Any) -> None:
    team, _ = Team.objects.get_or_create(slug="fuzz")
    user = reviewer_create(username="fuzzer", password="unused-password-1", team=team, role="reviewer")
    token = reviewer_token_create(user=user, name="fuzz").raw
    step = held_step(team)
    if case.path_parameters and "team" in case.path_parameters:
        case.path_parameters["team"] = "fuzz"  # the generated slug would only ever be a 404
    if case.path_parameters and "ref" in case.path_parameters:
        case.path_parameters["ref"] = step.operation_ref

    response = case.call_wsgi(headers={"Authorization": f"Bearer {token}"})

    assert response.status_code < 500, response.data
    if response.status_code >= 400:
        assert response.headers["Content-Type"].startswith("application/problem+json"), (
            case.path,
            response.status_code,
        )
        assert "code" in response.json
    # A generated If-Match is never the step's ETag ("<id>.<version>"): nothing is decided.
    assert not Decision.objects.filter(step=step).exists(), (case.headers, case.body)
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
