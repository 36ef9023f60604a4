"""The catalog in the admin: add, change, and the checks a catalog entry needs."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from accounts.models import Team
from envelopes.configuration import error_code_upsert, tool_configure
from envelopes.models import ErrorCode
from tests.conftest import error_envelope

pytestmark = pytest.mark.django_db

ADD = "/admin/envelopes/errorcode/add/"


@pytest.fixture
def admin(admin_client: Client) -> Client:
    """A superuser's client (pytest-django's admin_client)."""
    return admin_client


def entry(team: Team, tool: Any, **fields: Any) -> dict[str, Any]:
    return {
        "team": team.pk,
        "tool": tool.pk if tool else "",
        "code": "INVALID_RECIPIENT_ADDRESS",
        "category": "validation",
        "retry_class": "correctable",
        "next_action": "correct_input",
        "side_effect": "none",
        "description": "The address is not valid.",
        "hint": "Ask the user for a corrected address.",
        **fields,
    }


def test_an_entry_added_in_the_admin_documents_the_code_for_ingest(admin, agent, team) -> None:  # type: ignore[no-untyped-def]
    tool = tool_configure(team=team, name="send_email", settings={"strict_codes": True}, actor="test")
    assert agent.envelope(error_envelope()).status_code == 422  # not documented yet
    response = admin.post(ADD, entry(team, tool))
    assert response.status_code == 302, response.content.decode()[:2000]
    saved = ErrorCode.objects.get()
    assert (saved.tool, saved.code, saved.side_effect, saved.hint) == (
        tool, "INVALID_RECIPIENT_ADDRESS", "none", "Ask the user for a corrected address.",
    )
    assert agent.envelope(error_envelope()).status_code == 201
    body = agent.get("/api/v1/tools/send_email/codes").json()
    assert [code["code"] for code in body["codes"]] == ["INVALID_RECIPIENT_ADDRESS"]


def test_the_admin_lists_team_wide_and_per_tool_entries_and_changes_one(admin, team) -> None:  # type: ignore[no-untyped-def]
    tool = tool_configure(team=team, name="send_email", settings={}, actor="test")
    fields = {"category": "rate_limit", "retry_class": "transient", "next_action": "wait_and_retry"}
    wide = error_code_upsert(team=team, tool_name="*", code="RATE_LIMITED", fields=fields)
    error_code_upsert(team=team, tool_name="send_email", code="MAILBOX_FULL", fields=fields)
    listing = admin.get("/admin/envelopes/errorcode/").content.decode()
    assert "RATE_LIMITED" in listing and "team-wide" in listing
    assert "MAILBOX_FULL" in listing and "send_email" in listing
    changed = entry(team, None, code="RATE_LIMITED", **fields, description="Slow down.")
    response = admin.post(f"/admin/envelopes/errorcode/{wide.pk}/change/", changed)
    assert response.status_code == 302
    wide.refresh_from_db()
    assert (wide.tool, wide.description) == (None, "Slow down.")
    assert tool.error_codes.get().code == "MAILBOX_FULL"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"code": "not-upper"}, "Enter a valid value"),
        ({"category": "nonsense"}, "Select a valid choice"),
    ],
)
def test_the_admin_refuses_an_invalid_entry(admin, team, fields, message) -> None:  # type: ignore[no-untyped-def]
    tool = tool_configure(team=team, name="send_email", settings={}, actor="test")
    response = admin.post(ADD, entry(team, tool, **fields))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not ErrorCode.objects.exists()


def test_the_admin_refuses_another_teams_tool_and_a_second_entry_for_a_code(admin, team, other_team) -> None:  # type: ignore[no-untyped-def]
    theirs = tool_configure(team=other_team, name="billing", settings={}, actor="test")
    response = admin.post(ADD, entry(team, theirs))
    assert response.status_code == 200
    assert "billing is not a tool of team acme" in response.content.decode()
    assert not ErrorCode.objects.exists()

    assert admin.post(ADD, entry(team, None)).status_code == 302
    again = admin.post(ADD, entry(team, None, description="a second team-wide entry"))
    assert again.status_code == 200
    assert ErrorCode.objects.count() == 1
