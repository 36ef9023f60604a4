"""The overview /overview/: every tool of the user's teams, headline figures side by side."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from accounts.models import Team
from accounts.services import reviewer_create
from tests.metrics.conftest import U

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _half_past_noon():  # type: ignore[no-untyped-def]
    with time_machine.travel(U + timedelta(minutes=30), tick=False):
        yield


def browser(username: str, *teams: str) -> Client:
    for slug in teams:
        team = Team.objects.get(slug=slug)
        user = reviewer_create(username=username, password="correct-horse-battery", team=team, role="viewer")
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_visitors_are_sent_to_the_login_page(scenario, client) -> None:
    response = client.get("/overview/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_shows_each_tool_of_the_users_team_with_its_headline_figures(scenario) -> None:
    response = browser("vic", "acme").get("/overview/")
    assert response.status_code == 200
    rows = {row.tool.name: row for row, _ in response.context["rows"]}
    assert sorted(rows) == ["create_invoice", "send_email"]  # not globex's create_invoice
    invoice = rows["create_invoice"]
    assert (invoice.counts.envelopes, invoice.counts.errors) == (18, 15)
    assert invoice.documented_code_share == pytest.approx(12 / 15)
    assert invoice.below_target
    assert (invoice.counts.unknown_outcomes, invoice.counts.resolved_by_verification) == (4, 2)  # N too
    assert invoice.counts.duplicate_writes_prevented == 3
    assert invoice.counts.terminal_escalations == 4  # F J K P
    assert invoice.held.count == 6  # N verifying; F J K P escalated; M needs input
    assert rows["send_email"].counts.envelopes == 1
    html = response.content.decode()
    assert '<a href="/tools/create_invoice/?team=acme">create_invoice</a>' in html
    assert "below 0.90" in html
    assert "<th scope=\"col\">Team</th>" not in html  # one team: no team column


def test_a_member_of_two_teams_sees_both_teams_tools(scenario) -> None:
    response = browser("bo", "acme", "globex").get("/overview/")
    rows = [(row.tool.team.slug, row.tool.name) for row, _ in response.context["rows"]]
    assert rows == [("acme", "create_invoice"), ("acme", "send_email"), ("globex", "create_invoice")]
    assert "<th scope=\"col\">Team</th>" in response.content.decode()


def test_a_user_without_a_team_is_told_so(scenario) -> None:
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.create_user("nobody", password="correct-horse-battery"))
    response = client.get("/overview/")
    assert response.status_code == 200
    assert response.context["rows"] == []
    assert "not a member of any team" in response.content.decode()
