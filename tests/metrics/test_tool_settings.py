"""A tool's recovery settings: changed by a team admin on the tool page (or with configuretool,
or in the admin), refused when they break a rule, and audited with who changed what."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from accounts.models import Team
from accounts.services import reviewer_create
from envelopes.audit import audit_verify
from envelopes.configuration import tool_configure
from envelopes.models import AuditEvent, Tool
from tests.conftest import logged_in

pytestmark = pytest.mark.django_db

PAGE = "/tools/send_email/"
SAVE = "/tools/send_email/settings"


@pytest.fixture
def tool(team: Team) -> Tool:
    return tool_configure(team=team, name="send_email", settings={}, actor="test")


def member(team: Team, username: str, role: str) -> Client:
    return logged_in(reviewer_create(username=username, password="correct-horse-battery", team=team, role=role))


def form(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "team": "acme",
        "side_effects": "on",
        "required_approvals": "1",
        "max_attempts": "3",
        "consistency_window_s": "300",
        "verification_deadline_s": "3600",
        "approval_ttl_s": "86400",
        "halt_cooldown_s": "300",
        "safe_detail_keys": "",
    }
    data.update(changes)
    return {name: value for name, value in data.items() if value is not None}


def settings_links(tool: Tool) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(chain=f"tool:{tool.pk}", kind=AuditEvent.Kind.SETTINGS).order_by("seq"))


def test_an_admin_changes_the_settings_and_the_change_is_audited(team: Team, tool: Tool) -> None:
    admin = member(team, "ada", "admin")
    assert 'action="/tools/send_email/settings"' in admin.get(PAGE, {"team": "acme"}).content.decode()

    response = admin.post(SAVE, form(required_approvals="2", max_attempts="5", safe_detail_keys="invoice_id, field"))
    assert response.status_code == 303
    assert response["Location"].endswith("#settings")
    tool.refresh_from_db()
    assert (tool.required_approvals, tool.max_attempts, tool.safe_detail_keys) == (2, 5, ["invoice_id", "field"])
    [link] = settings_links(tool)
    assert link.actor == "ada"
    assert link.data["changes"] == {
        "required_approvals": [1, 2],
        "max_attempts": [3, 5],
        "safe_detail_keys": [[], ["invoice_id", "field"]],
    }
    assert audit_verify() == []


def test_settings_that_break_a_rule_are_refused_and_named(team: Team, tool: Tool) -> None:
    admin = member(team, "ada", "admin")
    response = admin.post(SAVE, form(consistency_window_s="600", verification_deadline_s="60"), follow=True)
    assert "verification_deadline_s must not be below consistency_window_s" in response.content.decode()
    response = admin.post(SAVE, form(safe_detail_keys="not an identifier"), follow=True)
    assert "safe_detail_keys must be a list of identifiers" in response.content.decode()
    response = admin.post(SAVE, form(max_attempts="0"), follow=True)
    assert "The settings were not saved: max_attempts" in response.content.decode()
    tool.refresh_from_db()
    assert (tool.consistency_window_s, tool.max_attempts, tool.safe_detail_keys) == (300, 3, [])
    assert settings_links(tool) == []


def test_saving_unchanged_settings_writes_no_audit_link(team: Team, tool: Tool) -> None:
    assert member(team, "ada", "admin").post(SAVE, form()).status_code == 303
    assert settings_links(tool) == []


def test_reviewers_see_the_settings_but_cannot_change_them(team: Team, tool: Tool) -> None:
    reviewer = member(team, "rita", "reviewer")
    html = reviewer.get(PAGE, {"team": "acme"}).content.decode()
    assert "Attempts at most" in html and "Save settings" not in html
    assert reviewer.post(SAVE, form(max_attempts="9")).status_code == 403
    tool.refresh_from_db()
    assert tool.max_attempts == 3


def test_another_teams_tool_is_404(team: Team, other_team: Team) -> None:
    theirs = tool_configure(team=other_team, name="send_email", settings={}, actor="test")
    outsider = member(team, "ada", "admin")
    assert outsider.post(SAVE, form(team=other_team.slug, max_attempts="9")).status_code == 404
    theirs.refresh_from_db()
    assert theirs.max_attempts == 3


def test_configuretool_names_itself_as_the_actor(team: Team, tool: Tool) -> None:
    call_command("configuretool", "acme", "send_email", "strict_codes=true", stdout=StringIO())
    [link] = settings_links(tool)
    assert (link.actor, link.data["changes"]) == ("manage.py configuretool", {"strict_codes": [False, True]})
