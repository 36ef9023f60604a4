"""The compact (seed 004) and MCP dialects over HTTP, normalised per contract §2."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from envelopes.models import Envelope, Tool
from tests.conftest import error_envelope, fingerprint, success_envelope

pytestmark = pytest.mark.django_db

COMPACT = 'application/json; profile="compact"'
MCP = 'application/json; profile="mcp"'


def test_seed_004_skipped_contact_is_recorded_and_the_run_goes_on(agent) -> None:
    answer = agent.envelope(
        {
            "code": "VALIDATION_FAILED",
            "category": "validation",
            "retryable": False,
            "scope": "resource",
            "resource_id": "contact_4127",
            "correlation_id": "c-88a1",
            "tool": "enrich_contact",
            "operation_ref": "enrich/4127",
            "run_id": "run_10k",
        },
        content_type=COMPACT,
    ).json()
    assert (answer["step"]["state"], answer["step"]["reason"]) == ("escalated", "escalation_requested")
    envelope = Envelope.objects.get()
    assert (envelope.dialect, envelope.next_action, envelope.retry_directive) == ("compact", "escalate", "never")
    assert envelope.commit_state == "unknown"  # tools have side effects unless configured otherwise
    skipped = agent.get("/api/v1/runs/run_10k/skipped").json()["skipped"]
    assert [(row["resource_id"], row["correlation_id"]) for row in skipped] == [("contact_4127", "c-88a1")]
    assert agent.attempt("enrich/4128", tool="enrich_contact", fingerprint=fingerprint("4128")).status_code == 201


def test_seed_004_service_wide_rate_limit_pauses_the_tool_two_seconds(agent) -> None:
    before = datetime.now().astimezone()
    answer = agent.envelope(
        {
            "code": "RATE_LIMITED",
            "category": "rate_limit",
            "retryable": True,
            "retry_after_ms": 2000,
            "scope": "service",
            "correlation_id": "c-88b2",
            "tool": "enrich_contact",
            "operation_ref": "enrich/4130",
        },
        content_type=COMPACT,
    ).json()
    assert answer["directive"]["action"] == "wait"
    not_before = datetime.fromisoformat(answer["directive"]["not_before"])
    assert before + timedelta(seconds=1.9) <= not_before <= before + timedelta(seconds=3)
    envelope = Envelope.objects.get()
    assert (envelope.category, envelope.commit_state, envelope.max_attempts_remaining) == (
        "rate_limit",
        "not_committed",
        3,
    )
    assert Tool.objects.get(name="enrich_contact").is_halted()
    refused = agent.attempt("enrich/4131", tool="enrich_contact", fingerprint=fingerprint("4131"))
    assert refused.json()["code"] == "tool_halted"
    assert 1 <= int(refused["Retry-After"]) <= 3


def test_compact_categories_are_mapped_to_the_canonical_ones(agent) -> None:
    agent.envelope(
        {
            "code": "AUTH_EXPIRED",
            "category": "auth",
            "retryable": False,
            "scope": "request",
            "correlation_id": "c-1",
            "tool": "crm",
            "operation_ref": "crm/1",
        },
        content_type=COMPACT,
    )
    agent.envelope(
        {
            "code": "UPSTREAM_TIMEOUT",
            "category": "upstream",
            "retryable": True,
            "scope": "request",
            "correlation_id": "c-2",
            "tool": "crm",
            "operation_ref": "crm/2",
        },
        content_type=COMPACT,
    )
    assert list(Envelope.objects.order_by("id").values_list("category", flat=True)) == ["authorization", "dependency"]


def test_a_compact_envelope_breaking_the_schema_is_422_problem(agent) -> None:
    response = agent.envelope(
        {
            "code": "RATE_LIMITED",
            "category": "weather",
            "retryable": "yes",
            "scope": "request",
            "correlation_id": "c",
            "tool": "crm",
            "operation_ref": "crm/3",
            "stack": "...",
        },
        content_type=COMPACT,
    )
    assert response.status_code == 422
    fields = {error["field"] for error in response.json()["errors"]}
    assert {"category", "retryable", "stack"} <= fields


def test_an_mcp_call_tool_result_carries_the_envelope(agent) -> None:
    body = {
        "content": [{"type": "text", "text": "invalid address"}],
        "isError": True,
        "structuredContent": error_envelope(),
    }
    answer = agent.envelope(body, content_type=MCP).json()
    assert answer["step"]["state"] == "needs_input"
    assert Envelope.objects.get().dialect == "mcp"
    ok = {"content": [], "isError": False, "structuredContent": success_envelope(operation_ref="mcp/ok")}
    assert agent.envelope(ok, content_type=MCP).json()["step"]["state"] == "succeeded"


def test_an_mcp_result_whose_is_error_disagrees_with_ok_is_422(agent) -> None:
    body = {"content": [], "isError": False, "structuredContent": error_envelope()}
    response = agent.envelope(body, content_type=MCP)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "isError"


def test_an_unknown_profile_is_refused(agent) -> None:
    response = agent.envelope(error_envelope(), content_type='application/json; profile="yaml"')
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "Content-Type"
