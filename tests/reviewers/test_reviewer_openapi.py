"""The reviewer API in the OpenAPI document: its paths (the away setting too), the reviewer token scheme, every
answer of §10 and the examples."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db

DECIDE = "/api/v1/teams/{team}/steps/{ref}/decisions"


def test_the_reviewer_paths_are_documented_with_the_reviewer_token(openapi_document: dict[str, Any]) -> None:
    paths = openapi_document["paths"]
    for path, method in [
        ("/api/v1/teams/{team}/queue", "get"),
        ("/api/v1/teams/{team}/steps/{ref}", "get"),
        (DECIDE, "post"),
        ("/api/v1/teams/{team}/away", "get"),
        ("/api/v1/teams/{team}/away", "put"),
        ("/api/v1/teams/{team}/away", "delete"),
    ]:
        assert path in paths, sorted(paths)
        assert paths[path][method]["security"] == [{"ReviewerToken": []}]
    scheme = openapi_document["components"]["securitySchemes"]["ReviewerToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert "hpr_" in scheme["bearerFormat"]
    # The agent API still says it takes agent keys only.
    assert openapi_document["paths"]["/api/v1/envelopes"]["post"]["security"] == [{"ApiKey": []}]


def test_the_decision_documents_each_answer_of_section_10_with_examples(openapi_document: dict[str, Any]) -> None:
    operation = openapi_document["paths"][DECIDE]["post"]

    assert set(operation["responses"]) >= {"201", "400", "401", "403", "404", "409", "412", "422", "428"}
    assert "step_changed" in operation["responses"]["412"]["description"]
    assert "precondition_required" in operation["responses"]["428"]["description"]
    if_match = next(p for p in operation["parameters"] if p["name"] == "If-Match")
    assert (if_match["in"], if_match["required"]) == ("header", True)
    request_examples = operation["requestBody"]["content"]["application/json"]["examples"]
    assert {example["value"]["action"] for example in request_examples.values()} == {"approve", "reject"}
    assert any("input" in example["value"] for example in request_examples.values())
    decided = operation["responses"]["201"]["content"]["application/json"]
    assert set(decided["schema"]["properties"]) == {"decision", "step", "grant"}
    assert decided["examples"]
    assert operation["responses"]["412"]["content"]["application/problem+json"]["examples"]
    body = openapi_document["components"]["schemas"][
        operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    ]
    assert body["properties"]["action"]
    assert set(body["properties"]) == {"action", "reason", "input", "grant"}


def test_the_away_setting_documents_its_fields_and_refusals(openapi_document: dict[str, Any]) -> None:
    put = openapi_document["paths"]["/api/v1/teams/{team}/away"]["put"]
    body = put["requestBody"]["content"]["application/json"]["schema"]
    name = body["$ref"].rsplit("/", 1)[-1]
    assert set(openapi_document["components"]["schemas"][name]["properties"]) == {"until", "delegate"}
    assert "application/problem+json" in put["responses"]["422"]["content"]
    assert "delegate" in put["responses"]["422"]["description"]
