"""An away reviewer gets no notices (contract §12 "Delegation"): the `@reviewers` email leaves
them out while they are away, and reaches them again once they are back; their delegate, a
reviewer too, still gets it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.away import away_clear, away_set
from accounts.models import Team
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
