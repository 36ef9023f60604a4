"""Each try has a hard wall-clock deadline: a receiver that trickles its answer a byte at a
time (so that no single read ever times out) cannot hold a try, or the worker, past it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from webhooks.delivery import deliver_due_messages, message_send, messages_claim
from webhooks.models import OutboxMessage
from webhooks.outbox import event_emit
from webhooks.services import endpoint_create

from .conftest import Answer, Receiver, TricklingReceiver

pytestmark = pytest.mark.usefixtures("no_prompt_delivery", "allow_private")


def emit(team: Team) -> OutboxMessage:
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "send_email"})
    return OutboxMessage.objects.order_by("-id").first()  # type: ignore[return-value]


def test_a_trickling_answer_is_cut_at_the_deadline(team: Team, trickling_receiver: TricklingReceiver) -> None:
    endpoint_create(team=team, url=trickling_receiver.url())
    emit(team)
    [claimed] = messages_claim()
    started = time.monotonic()
    result = message_send(claimed, timeout=1.5)  # each byte comes 0.3 s apart: no read waits 1.5 s
    took = time.monotonic() - started
    assert 1.4 <= took < 2.5, took
    assert result.status_code is None and not result.delivered
    assert result.error.startswith("timeout: no answer within 1.5 s"), result.error
    assert trickling_receiver.connections == 1


def test_a_try_cut_at_the_deadline_is_a_failed_try_retried_on_the_schedule(
    team: Team, trickling_receiver: TricklingReceiver
) -> None:
    endpoint_create(team=team, url=trickling_receiver.url())
    message = emit(team)
    started = time.monotonic()
    assert deliver_due_messages(timeout=1.0) == 1
    assert time.monotonic() - started < 2.0
    tried = message.delivery_tries.get()
    assert tried.status_code is None and tried.error.startswith("timeout: no answer within 1 s")
    assert tried.latency_ms is not None and 900 <= tried.latency_ms < 2000
    message.refresh_from_db()
    assert message.status == "pending" and message.tries == 1
    assert timezone.now() + timedelta(seconds=3) < message.next_try_at < timezone.now() + timedelta(seconds=6)


def test_the_deadline_is_per_try_not_per_sweep(team: Team, receiver: Receiver) -> None:
    endpoint_create(team=team, url=receiver.url())
    receiver.answer(*[Answer(200, delay=0.4)] * 3)
    for _ in range(3):
        emit(team)
    # Three tries of 0.4 s in one sweep (1.2 s in all), each under its own 1 s deadline.
    assert deliver_due_messages(timeout=1.0) == 3
    assert OutboxMessage.objects.filter(status="delivered").count() == 3
