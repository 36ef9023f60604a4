"""An away reviewer gets no notices (contract §12 "Delegation"): the `@reviewers` email leaves
them out while they are away, and reaches them again once they are back; their delegate, a
reviewer too, still gets it. A group's channel (`@group:NAME`) reaches the delegate of an away
member in their stead, as the delegate decides the group's steps for them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.away import away_clear, away_set
from accounts.groups import group_member_add
from accounts.models import Team
from envelopes.configuration import tool_configure
from notifications.services import channel_create
from notifications.tasks import notify
from tests.conftest import AgentClient
from tests.notifications.conftest import Inbox, hold

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")


def _with_email(user: Any) -> Any:
    user.email = f"{user.username}@example.com"
    user.save()
    return user


def test_the_away_reviewer_is_left_out_of_reviewers_email(
    team: Team, agent: AgentClient, smtp: Inbox, make_reviewer: Any
) -> None:
    alice = _with_email(make_reviewer("alice", "reviewer"))
    _with_email(make_reviewer("bob", "reviewer"))
    channel_create(team=team, kind="email", target="@reviewers", batch_window_s=0)  # a message per notice
    away_set(user=alice, team=team, until=timezone.now() + timedelta(days=2), delegate="bob")
    hold(agent, "run_7/charge_1")
    notify()
    assert [envelope.rcpt_tos for envelope in smtp.envelopes] == [["bob@example.com"]]

    away_clear(user=alice, team=team)
    hold(agent, "run_7/charge_2")
    notify()
    assert smtp.envelopes[-1].rcpt_tos == ["alice@example.com", "bob@example.com"]


def test_a_groups_email_goes_to_the_away_members_delegate_instead(
    team: Team, agent: AgentClient, smtp: Inbox, make_reviewer: Any
) -> None:
    alice = _with_email(make_reviewer("alice", "reviewer"))
    fay = _with_email(make_reviewer("fay", "reviewer"))
    _with_email(make_reviewer("bob", "reviewer"))  # outside finance
    _with_email(make_reviewer("rita", "reviewer"))  # outside finance, delegate of nobody
    for member in (alice, fay):
        group_member_add(team=team, name="finance", user=member)
    tool_configure(team=team, name="charge_card", settings={"approver_group": "finance"}, actor="t")
    channel_create(team=team, kind="email", target="@group:finance", batch_window_s=0)
    away_set(user=alice, team=team, until=timezone.now() + timedelta(days=2), delegate="bob")
    hold(agent, "run_7/charge_1")
    notify()
    assert [envelope.rcpt_tos for envelope in smtp.envelopes] == [["bob@example.com", "fay@example.com"]]
