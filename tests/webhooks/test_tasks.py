"""The Celery task beat runs is the delivery sweep."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.db import transaction

from envelopes.models import Team
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
