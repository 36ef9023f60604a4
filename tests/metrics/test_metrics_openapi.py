"""The metrics endpoint's error answers are documented as what it sends: application/problem+json."""

from __future__ import annotations

from typing import Any

import pytest
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


@pytest.fixture
def document(client: Any) -> dict[str, Any]:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    validate(body)
    return body


def test_the_metrics_errors_are_documented_as_problem_json(document: dict[str, Any]) -> None:
    responses = document["paths"]["/api/v1/tools/{tool}/metrics"]["get"]["responses"]
    assert {"200", "401", "404", "422", "429"} <= set(responses)
    for status in ("401", "404", "422", "429"):
        content = responses[status]["content"]
        assert list(content) == [PROBLEM], (status, list(content))
        assert {"type", "title", "status", "detail", "code"} <= set(content[PROBLEM]["schema"]["properties"])
    assert list(responses["200"]["content"]) == ["application/json"]


def test_no_error_answer_of_the_api_is_documented_as_plain_json(document: dict[str, Any]) -> None:
    plain = [
        (path, method, status)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        for status, response in operation.get("responses", {}).items()
        if status[0] in "45" and "application/json" in response.get("content", {})
    ]
    assert plain == []
