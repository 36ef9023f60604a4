"""Delegation in the dashboard (contract §12), with the Django test client: the account page's
form sets and clears a time away (a bad delegate or time is shown at its field), the queues say
who is away and who decides for them, and the delegate approves for the away member on the step
page, whose timeline and quorum line say "bob for alice"."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.away import away_set
from accounts.models import Membership
from envelopes.models import Step
from tests.conftest import logged_in
from tests.delegation import finance_step, people

pytestmark = pytest.mark.django_db
__all__ = ["finance_step", "people"]


def _form(until: str, delegate: str) -> dict[str, str]:
    return {"away-acme-until": until, "away-acme-delegate": delegate}


def _in_days(days: int) -> str:
    return (timezone.now() + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M")


def test_the_account_form_sets_and_clears_the_time_away(people: dict[str, Any], team: Any) -> None:
    alice = logged_in(people["alice"])
    page = alice.get("/account/").content.decode()
    assert 'id="away-acme"' in page
    assert '<option value="bob">bob</option>' in page and '<option value="alice">' not in page
    answer = alice.post("/account/away/acme", _form(_in_days(3), "bob"), follow=True)
    assert answer.status_code == 200
    assert "bob decides for you" in answer.content.decode()
    membership = Membership.objects.get(user=people["alice"], team=team)
    assert membership.delegate == people["bob"] and membership.is_away(timezone.now())
    alice.post("/account/away/acme", {"clear": "1"})
    membership.refresh_from_db()
    assert (membership.away_until, membership.delegate) == (None, None)


@pytest.mark.parametrize(
    ("until", "delegate", "field"),
    [
        (_in_days(3), "gus", "delegate"),  # a reviewer of another team
        (_in_days(3), "alice", "delegate"),  # herself
        (_in_days(-1), "bob", "until"),
        ("soon", "bob", "until"),
    ],
)
def test_a_bad_setting_is_shown_at_its_field(
    people: dict[str, Any], team: Any, make_reviewer: Any, other_team: Any, until: str, delegate: str, field: str
) -> None:
    make_reviewer("gus", "reviewer", in_team=other_team)
    answer = logged_in(people["alice"]).post("/account/away/acme", _form(until, delegate))
    assert answer.status_code == 400
    assert f'id="away-acme-{field}-error"' in answer.content.decode()
    assert not Membership.objects.get(user=people["alice"], team=team).away_until


def test_another_teams_form_is_404(people: dict[str, Any], other_team: Any) -> None:
    assert logged_in(people["alice"]).post("/account/away/globex", _form(_in_days(3), "bob")).status_code == 404


def test_the_queues_say_who_is_away_and_who_decides_for_them(people: dict[str, Any], team: Any) -> None:
    until = timezone.now() + timedelta(days=3)
    away_set(user=people["alice"], team=team, until=until, delegate="bob")
    page = logged_in(people["fay"]).get("/").content.decode()
    assert f"Away: <strong>alice</strong> until {until:%Y-%m-%d %H:%M} UTC — bob decides for them" in page


def test_the_delegate_approves_for_the_away_member_on_the_step_page(
    people: dict[str, Any], team: Any, finance_step: Step
) -> None:
    bob = logged_in(people["bob"])
    assert "read-only" in bob.get(f"/steps/{finance_step.pk}/").content.decode()
    away_set(user=people["alice"], team=team, until=timezone.now() + timedelta(days=3), delegate="bob")
    queue = bob.get("/").content.decode()
    assert 'class="tag tag-ok">for finance' in queue  # bob may decide it now
    page = bob.get(f"/steps/{finance_step.pk}/").content.decode()
    assert "You decide for alice" in page
    answer = bob.post(
        f"/steps/{finance_step.pk}/decide",
        {
            "action": "approve",
            "reason": "",
            "expected_state": finance_step.state,
            "expected_since": finance_step.state_entered_at.isoformat(),
        },
    )
    assert answer.status_code in (200, 303), answer.content
    decision = finance_step.decisions.get()
    assert decision.on_behalf_of == people["alice"]
    shown = logged_in(people["fay"]).get(f"/steps/{finance_step.pk}/").content.decode()
    assert "approved by bob for alice" in shown
    assert "</strong> by bob for alice" in shown  # the timeline's decision
