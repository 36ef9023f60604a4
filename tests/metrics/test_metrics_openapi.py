"""The metrics endpoint's error answers are documented as what it sends: application/problem+json."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def test_the_metrics_errors_are_documented_as_problem_json(openapi_document: dict[str, Any]) -> None:
    responses = openapi_document["paths"]["/api/v1/tools/{tool}/metrics"]["get"]["responses"]
    assert {"200", "401", "404", "422", "429"} <= set(responses)
    for status in ("401", "404", "422", "429"):
        content = responses[status]["content"]
        assert list(content) == [PROBLEM], (status, list(content))
        assert {"type", "title", "status", "detail", "code"} <= set(content[PROBLEM]["schema"]["properties"])
    assert list(responses["200"]["content"]) == ["application/json"]


def test_no_error_answer_of_the_api_is_documented_as_plain_json(openapi_document: dict[str, Any]) -> None:
    plain = [
        (path, method, status)
        for path, operations in openapi_document["paths"].items()
        for method, operation in operations.items()
        for status, response in operation.get("responses", {}).items()
        if status[0] in "45" and "application/json" in response.get("content", {})
    ]
    assert plain == []
