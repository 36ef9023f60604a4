"""Delegation in two real browsers (contract §12): alice, in finance, marks herself away on her
account page naming bob; bob, outside finance, then sees the queues say so and approves the
finance step for her; the step page says "bob for alice"."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from accounts.groups import group_member_add
from accounts.models import Team
from envelopes.configuration import tool_configure
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.browser.conftest import Watched, log_in
from tests.conftest import AgentClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def test_alice_is_away_and_bob_approves_for_her(
    open_page: OpenPage, make_reviewer: Any, team: Team, agent: AgentClient
) -> None:
    alice_user = make_reviewer("alice", "reviewer")
    make_reviewer("bob", "reviewer")
    group_member_add(team=team, name="finance", user=alice_user)
    tool_configure(team=team, name="charge_card", settings={"approver_group": "finance"}, actor="test")
    step = post_envelope(agent, approval_envelope(operation_ref="run_7/wire_20000"))

    alice = open_page().page
    log_in(alice, "alice")
    alice.goto("/account/")
    form = alice.locator("#away-acme")
    form.get_by_label("Away until (UTC)").fill((timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M"))
    form.get_by_label("Delegate, who decides for you").select_option("bob")
    form.get_by_role("button", name="Be away").click()
    expect(alice.locator("#away-acme")).to_contain_text("bob decides for you")

    bob = open_page().page  # his own context: his own session
    log_in(bob, "bob")
    bob.goto("/")
    expect(bob.locator("#away")).to_contain_text("Away: alice until")
    expect(bob.locator("#away")).to_contain_text("bob decides for them")
    bob.goto(f"/steps/{step.pk}/")
    expect(bob.locator("#decides-for")).to_contain_text("You decide for alice")
    bob.get_by_role("button", name="Approve", exact=True).click()
    expect(bob.locator("#decision-feedback")).to_be_visible()
    decision = step.decisions.get()
    assert (decision.reviewer.username, decision.on_behalf_of.username) == ("bob", "alice")  # type: ignore[union-attr]
    bob.goto(f"/steps/{step.pk}/")
    expect(bob.locator("body")).to_contain_text("by bob for alice")
