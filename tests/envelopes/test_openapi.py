"""The OpenAPI document is valid, and the API honours it under generated inputs."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate

from accounts.services import api_key_create


@pytest.mark.django_db
def test_the_schema_is_valid_openapi_3(client) -> None:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    validate(document)
    assert "/api/v1/envelopes" in document["paths"]
    assert "/api/v1/steps/{ref}/attempts" in document["paths"]


@pytest.mark.django_db
def test_the_docs_page_is_served_offline(client) -> None:
    page = client.get("/api/docs/")
    assert page.status_code == 200
    assert b"cdn" not in page.content.lower()


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


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@pytest.mark.django_db
def test_the_api_never_answers_5xx_or_a_non_problem_error(case) -> None:  # type: ignore[no-untyped-def]
    team = _fuzz_team()
    key = api_key_create(team=team, name="fuzz").raw
    response = case.call_wsgi(headers={"Authorization": f"Bearer {key}"})
    assert response.status_code < 500, response.data
    if response.status_code >= 400:
        assert response.headers["Content-Type"].startswith("application/problem+json"), (
            case.path,
            response.status_code,
            response.headers["Content-Type"],
        )
        assert "code" in response.json


def _fuzz_team():  # type: ignore[no-untyped-def]
    from accounts.models import Team

    return Team.objects.get_or_create(slug="fuzz")[0]


@pytest.mark.django_db
def test_the_schema_documents_the_proposed_input_and_its_refusals(client) -> None:
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    attempts = document["paths"]["/api/v1/steps/{ref}/attempts"]["post"]
    request = attempts["requestBody"]["content"]["application/json"]
    assert "input" in document["components"]["schemas"][request["schema"]["$ref"].rsplit("/", 1)[1]]["properties"]
    assert {"WithTheInput", "FingerprintOnly"} <= set(request["examples"])
    refusal = attempts["responses"]["422"]
    examples = refusal["content"]["application/problem+json"]["examples"]
    mismatch = examples["FingerprintMismatch"]["value"]
    assert mismatch["errors"] == [{"field": "input_fingerprint", "rule": "matches_input"}]
    assert {"FingerprintMismatch", "InputTooLarge", "ToolLimitReached"} <= set(examples)
    assert "409" in attempts["responses"] and "step" in str(attempts["responses"]["409"])
    ingest = document["paths"]["/api/v1/envelopes"]["post"]["responses"]["422"]
    assert "time_window" in ingest["description"] and "tool_limit_reached" in ingest["description"]
    step = document["paths"]["/api/v1/steps/{ref}"]["get"]["responses"]["200"]["content"]["application/json"]
    shape = step["schema"]["properties"]
    assert "proposal" in shape and "proposal" in step["schema"]["required"]
    assert {"input_fingerprint", "edited"} <= set(shape["decisions"]["items"]["properties"])
    assert {"input", "input_fingerprint"} <= set(shape["directive"]["properties"])
    example = next(iter(step["examples"].values()))["value"]
    assert example["directive"]["input"] and example["decisions"][0]["edited"] is True
