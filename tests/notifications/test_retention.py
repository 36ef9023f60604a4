"""The notifications history is kept for HOLDPOINT_NOTIFICATION_RETENTION_DAYS, then purged by
beat's hourly task: finished messages with their tries and notices, notices dropped before any
message, watches that owe nothing more. Nothing still pending or still due is purged."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from accounts.models import Team
from approvals.services import step_decide
from envelopes.models import Step
from notifications.models import Message, Notice, SendTry, Watch
from notifications.retention import history_purge
from notifications.services import channel_create
from notifications.tasks import notify, purge_notification_history
from tests.conftest import AgentClient
from tests.notifications.conftest import hold
from tests.webhooks.conftest import Answer, Receiver

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")


def cancel(team: Team, step: Step, reviewer: Any) -> None:
    step_decide(team=team, step_id=step.pk, actor=reviewer, action="cancel", reason="not needed")


def refs(messages: Any) -> list[str]:
    return sorted({notice.step.operation_ref for message in messages for notice in message.notices.all()})


def test_finished_history_goes_after_the_retention_and_nothing_pending_does(
    team: Team, agent: AgentClient, receiver: Receiver, make_reviewer: Any, settings: Any
) -> None:
    settings.HOLDPOINT_NOTIFICATION_RETENTION_DAYS = 30
    rita = make_reviewer("rita", "reviewer")
    channel_create(
        team=team,
        kind="webhook",
        target=receiver.url(),
        events=["approval.requested", "step.overdue"],
        batch_window_s=0,
    )
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=31), tick=False):
        old = hold(agent, "run_1/old")
        notify()  # sent: a message, its try, its notice
        gone = hold(agent, "run_1/gone")
        cancel(team, gone, rita)
        notify()  # decided before it went out: its notice is dropped, no message
        cancel(team, old, rita)
    with time_machine.travel(now - timedelta(days=31) + timedelta(hours=2), tick=False):
        notify()  # the reminders were due: both steps are decided, so the watches owe nothing
    with time_machine.travel(now - timedelta(days=29), tick=False):
        hold(agent, "run_1/recent")
        notify()
    receiver.answer(Answer(503))
    hold(agent, "run_1/pending")
    notify()  # a failed try: pending, to be retried
    assert Message.objects.count() == 3 and SendTry.objects.count() == 3
    assert Notice.objects.filter(status="dropped").count() == 1
    assert Watch.objects.filter(due_at__isnull=True).count() == 2

    assert history_purge(now=now, batch=1) == 1 + 1 + 2  # batches of one, until done

    assert refs(Message.objects.all()) == ["run_1/pending", "run_1/recent"]
    assert SendTry.objects.count() == 2
    # (the recent step, still held, is reminded of in the pending message)
    assert set(Notice.objects.values_list("step__operation_ref", flat=True)) == {"run_1/pending", "run_1/recent"}
    assert sorted(Watch.objects.values_list("step__operation_ref", flat=True)) == ["run_1/pending", "run_1/recent"]
    assert Message.objects.filter(status="pending").count() == 1


def test_the_retention_is_read_at_each_purge_and_beat_runs_it(
    team: Team, agent: AgentClient, receiver: Receiver, settings: Any
) -> None:
    channel_create(team=team, kind="webhook", target=receiver.url())
    with time_machine.travel(timezone.now() - timedelta(days=8), tick=False):
        hold(agent, "run_1/week_old")
        notify()
    settings.HOLDPOINT_NOTIFICATION_RETENTION_DAYS = 30
    assert purge_notification_history() == 0
    settings.HOLDPOINT_NOTIFICATION_RETENTION_DAYS = 7
    assert purge_notification_history() == 1
    assert not Message.objects.exists() and not SendTry.objects.exists()
