"""The webhook history is kept for a while, then purged by beat's hourly task: delivered
messages (with their tries) after HOLDPOINT_WEBHOOK_RETENTION_DAYS, dead letters after
HOLDPOINT_DEAD_LETTER_RETENTION_DAYS; a message still being delivered never."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from outbound.retry import MAX_TRIES
from webhooks.delivery import deliver_due_messages
from webhooks.models import DeliveryTry, OutboxMessage, WebhookEndpoint
from webhooks.outbox import event_emit
from webhooks.retention import dead_letters_purge, delivered_messages_purge
from webhooks.tasks import purge_webhook_history

from .conftest import Answer, Receiver

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")


def emit(team: Team, tool: str) -> OutboxMessage:
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": tool})
    return OutboxMessage.objects.order_by("-id").first()  # type: ignore[return-value]


def tools(queryset) -> list[str]:  # type: ignore[no-untyped-def]
    import json

    return sorted(json.loads(message.body)["data"]["tool"] for message in queryset)


def test_delivered_messages_and_their_tries_go_after_the_retention(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_RETENTION_DAYS = 30
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=31), tick=False):
        receiver.answer(Answer(500))  # old_a: a failed try, then delivered 5 s later
        emit(team, "old_a")
        emit(team, "old_b")
        deliver_due_messages()
    with time_machine.travel(now - timedelta(days=31) + timedelta(seconds=10), tick=False):
        deliver_due_messages()
    with time_machine.travel(now - timedelta(days=29), tick=False):
        emit(team, "recent")
        deliver_due_messages()
    receiver.answer(Answer(503))
    emit(team, "pending")
    deliver_due_messages()
    assert OutboxMessage.objects.filter(status="delivered").count() == 3
    assert DeliveryTry.objects.count() == 5

    assert delivered_messages_purge(now=now, batch=1) == 2  # batches of one: until done
    assert tools(OutboxMessage.objects.all()) == ["pending", "recent"]
    assert DeliveryTry.objects.count() == 2  # the purged messages' three tries went with them
    assert {t.message.status for t in DeliveryTry.objects.select_related("message")} == {"delivered", "pending"}


def test_dead_letters_stay_longer_then_go_and_a_pending_message_never(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_RETENTION_DAYS = 30
    settings.HOLDPOINT_DEAD_LETTER_RETENTION_DAYS = 90
    now = timezone.now()
    receiver.answer(*[Answer(503)] * (2 * MAX_TRIES))
    for tool, age in (("dead_old", 91), ("dead_recent", 60)):
        start = now - timedelta(days=age)
        with time_machine.travel(start, tick=False):
            message = emit(team, tool)
        for day in range(MAX_TRIES):
            with time_machine.travel(start + timedelta(days=day * 1.2), tick=False):
                deliver_due_messages()
        message.refresh_from_db()
        assert message.status == "dead"
    with time_machine.travel(now - timedelta(days=200), tick=False):
        stuck = emit(team, "pending_old")  # a message still being delivered (an old lease)
    OutboxMessage.objects.filter(pk=stuck.pk).update(next_try_at=now + timedelta(minutes=5))

    assert delivered_messages_purge(now=now) == 0  # dead letters are not "delivered"
    assert dead_letters_purge(now=now) == 1
    assert tools(OutboxMessage.objects.all()) == ["dead_recent", "pending_old"]
    assert DeliveryTry.objects.count() == MAX_TRIES  # dead_recent's; dead_old's went with it
    assert purge_webhook_history.apply().get() == 0


def test_the_retention_is_read_at_each_purge(team: Team, endpoint: WebhookEndpoint, settings) -> None:  # type: ignore[no-untyped-def]
    with time_machine.travel(timezone.now() - timedelta(days=3), tick=False):
        emit(team, "three_days_old")
        deliver_due_messages()
    settings.HOLDPOINT_WEBHOOK_RETENTION_DAYS = 7
    assert delivered_messages_purge() == 0
    settings.HOLDPOINT_WEBHOOK_RETENTION_DAYS = 2
    assert delivered_messages_purge() == 1
