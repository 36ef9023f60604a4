"""The Celery task beat runs is the delivery sweep."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.db import transaction

from accounts.models import Team
from webhooks.delivery import sweep_slot_release, sweep_slot_take
from webhooks.models import OutboxMessage, WebhookEndpoint
from webhooks.outbox import event_emit
from webhooks.tasks import deliver_due_messages

from .conftest import Receiver


def test_beat_schedules_this_task() -> None:
    scheduled = {entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    assert deliver_due_messages.name in scheduled


@pytest.mark.usefixtures("no_prompt_delivery")
def test_the_task_delivers_due_messages(team: Team, endpoint: WebhookEndpoint, receiver: Receiver) -> None:
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    result = deliver_due_messages.apply()  # runs in this process, no broker
    assert result.get() == 1
    assert OutboxMessage.objects.get().status == "delivered"
    assert len(receiver.received) == 1


@pytest.mark.usefixtures("no_prompt_delivery")
def test_one_sweep_at_a_time_by_default_the_others_return_at_once(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    held = sweep_slot_take()  # a sweep running elsewhere (another worker process)
    assert held
    assert deliver_due_messages.apply().get() == 0  # it would take a second process: it does not
    assert receiver.received == []
    sweep_slot_release(held)
    assert deliver_due_messages.apply().get() == 1
    assert sweep_slot_take() == held  # the task gave its slot back


@pytest.mark.usefixtures("no_prompt_delivery")
def test_more_sweeps_at_once_when_configured(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_CONCURRENT_SWEEPS = 2
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    first = sweep_slot_take()
    assert deliver_due_messages.apply().get() == 1
    second, third = sweep_slot_take(), sweep_slot_take()
    assert first and second and third is None
    for key in (first, second):
        sweep_slot_release(key)


@pytest.mark.usefixtures("no_prompt_delivery")
def test_without_a_cache_the_sweep_runs(team: Team, endpoint: WebhookEndpoint, receiver: Receiver, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def cache_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("redis down")

    monkeypatch.setattr("webhooks.delivery.cache.add", cache_down)
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    assert deliver_due_messages.apply().get() == 1
