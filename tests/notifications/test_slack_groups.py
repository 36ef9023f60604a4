"""Slack's Approve on a step held for a group (contract §12): a linked reviewer outside the group
is told "only finance may decide this" and nothing is decided; a member of it approves. Payloads
signed as Slack signs them (tests/notifications/test_slack_actions.py). A delegate's Approve
decides for the away member (§12 "Delegation")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.away import away_set
from accounts.groups import group_create, group_member_add
from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import Decision, Step
from tests.notifications import test_slack_actions as actions
from tests.notifications.conftest import SlackReceiver
from tests.notifications.test_slack_actions import approve_value, link, post, press, replies
from tests.webhooks.conftest import Receiver

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue", "replies_inline")

# The Slack tests' fixtures: the signing secret, replies sent inline, and a held step in a channel.
signing_secret, replies_inline, held = actions.signing_secret, actions.replies_inline, actions.held


@pytest.fixture
def finance_tool(team: Team) -> None:
    group_create(team=team, name="finance")
    tool_configure(team=team, name="charge_card", settings={"approver_group": "finance"}, actor="test")


def test_a_press_from_outside_the_group_is_refused_naming_it(
    team: Team, finance_tool: None, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    link(make_reviewer("rita", "reviewer"), "U0RITA")
    assert post(press(approve_value(slack), "U0RITA", receiver.url())).status_code == 200
    assert not Decision.objects.exists()
    held.refresh_from_db()
    assert held.state == "awaiting_approval"
    (reply,) = replies(receiver)
    assert reply["response_type"] == "ephemeral"
    assert "only finance may decide this" in reply["text"].lower()


def test_a_member_of_the_group_approves_from_slack(
    team: Team, finance_tool: None, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    fay = make_reviewer("fay", "reviewer")
    group_member_add(team=team, name="finance", user=fay)
    link(fay, "U0FAY")
    assert post(press(approve_value(slack), "U0FAY", receiver.url())).status_code == 200
    held.refresh_from_db()
    assert held.state == "retry_ready"
    assert Decision.objects.get().reviewer == fay


def test_a_delegate_approves_from_slack_for_the_away_member(
    team: Team, finance_tool: None, held: Step, slack: SlackReceiver, receiver: Receiver, make_reviewer: Any
) -> None:
    alice = make_reviewer("alice", "reviewer")
    group_member_add(team=team, name="finance", user=alice)
    link(make_reviewer("bob", "reviewer"), "U0BOB")
    away_set(user=alice, team=team, until=timezone.now() + timedelta(days=1), delegate="bob")
    assert post(press(approve_value(slack), "U0BOB", receiver.url())).status_code == 200
    held.refresh_from_db()
    assert held.state == "retry_ready"
    decision = Decision.objects.get()
    assert (decision.reviewer.username, decision.on_behalf_of) == ("bob", alice)  # type: ignore[union-attr]
