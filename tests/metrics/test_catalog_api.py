"""The error-code catalog: GET /api/v1/tools/{tool}/codes, and strict_codes at ingest."""

from __future__ import annotations

import pytest

from envelopes.configuration import error_code_upsert, tool_configure
from envelopes.models import Envelope, Quarantine
from tests.conftest import error_envelope

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def document(team, tool: str, code: str, **fields: str) -> None:  # type: ignore[no-untyped-def]
    error_code_upsert(
        team=team, tool_name=tool, code=code,
        fields={"category": "validation", "retry_class": "correctable", "next_action": "correct_input", **fields},
    )


def test_it_lists_the_tools_codes_and_the_team_wide_ones(agent, team) -> None:
    document(team, "send_email", "INVALID_RECIPIENT_ADDRESS", side_effect="none",
             description="The address is not valid.", hint="Ask the user for a corrected address.")
    document(team, "*", "RATE_LIMITED", category="rate_limit", retry_class="transient", next_action="wait_and_retry")
    document(team, "create_invoice", "DUPLICATE_INVOICE", category="conflict")
    response = agent.get("/api/v1/tools/send_email/codes")
    assert response.status_code == 200
    assert response.json() == {
        "tool": "send_email",
        "codes": [
            {
                "code": "INVALID_RECIPIENT_ADDRESS", "scope": "tool", "category": "validation",
                "retry_class": "correctable", "next_action": "correct_input", "side_effect": "none",
                "description": "The address is not valid.", "hint": "Ask the user for a corrected address.",
            },
            {
                "code": "RATE_LIMITED", "scope": "team", "category": "rate_limit", "retry_class": "transient",
                "next_action": "wait_and_retry", "side_effect": "unknown", "description": "", "hint": "",
            },
        ],
    }


def test_another_teams_tool_and_an_unknown_tool_are_404(agent, other_team) -> None:
    document(other_team, "billing", "CARD_DECLINED")
    for tool in ("billing", "no_such_tool"):
        response = agent.get(f"/api/v1/tools/{tool}/codes")
        assert response.status_code == 404
        assert response["Content-Type"].startswith(PROBLEM)


def test_the_catalog_needs_a_key(client, team) -> None:
    document(team, "send_email", "INVALID_RECIPIENT_ADDRESS")
    assert client.get("/api/v1/tools/send_email/codes").status_code == 401


def test_a_strict_tool_refuses_an_undocumented_code_and_quarantines_it(agent, team) -> None:
    tool_configure(team=team, name="send_email", settings={"strict_codes": True}, actor="test")
    response = agent.envelope(error_envelope(code="NEVER_DOCUMENTED"))
    assert response.status_code == 422
    assert response["Content-Type"].startswith(PROBLEM)
    body = response.json()
    assert body["code"] == "undocumented_code"
    assert {"field": "code", "rule": "documented"} in body["errors"]
    assert not Envelope.objects.exists()
    assert Quarantine.objects.get().code == "undocumented_code"


def test_a_strict_tool_accepts_a_code_documented_for_it_or_team_wide(agent, team) -> None:
    tool_configure(team=team, name="send_email", settings={"strict_codes": True}, actor="test")
    document(team, "send_email", "INVALID_RECIPIENT_ADDRESS")
    document(team, "*", "MAILBOX_FULL")
    assert agent.envelope(error_envelope()).status_code == 201
    assert agent.envelope(error_envelope(operation_ref="r2", code="MAILBOX_FULL")).status_code == 201
    assert list(Envelope.objects.values_list("documented", flat=True)) == [True, True]


def test_a_lenient_tool_accepts_an_undocumented_code_and_flags_it(agent) -> None:
    response = agent.envelope(error_envelope(code="NEVER_DOCUMENTED"))
    assert response.status_code == 201
    assert "undocumented_code" in response.json()["flags"]
    assert Envelope.objects.get().documented is False
