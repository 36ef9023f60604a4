"""The reviewer API under generated inputs (schemathesis, from the OpenAPI document): never a
5xx, every error a problem+json with a code, and no step decided without its ETag."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from approvals.services import reviewer_create
from envelopes.models import Team
from reviewers.services import reviewer_token_create

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


@schema.include(path_regex="^/api/v1/teams/").parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@pytest.mark.django_db
def test_the_reviewer_api_never_answers_5xx_or_a_non_problem_error(case: Any) -> None:
    team, _ = Team.objects.get_or_create(slug="fuzz")
    user = reviewer_create(username="fuzzer", password="unused-password-1", team=team, role="reviewer")
    token = reviewer_token_create(user=user, name="fuzz").raw
    if case.path_parameters and "team" in case.path_parameters:
        case.path_parameters["team"] = "fuzz"  # the generated slug would only ever be a 404

    response = case.call_wsgi(headers={"Authorization": f"Bearer {token}"})

    assert response.status_code < 500, response.data
    if response.status_code >= 400:
        assert response.headers["Content-Type"].startswith("application/problem+json"), (
            case.path,
            response.status_code,
        )
        assert "code" in response.json
