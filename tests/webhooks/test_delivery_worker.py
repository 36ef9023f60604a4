"""Delivery on real Celery workers: a receiver that trickles its answer a byte at a time cannot
stall the timers, and the documented default worker (no -Q) still delivers."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from envelopes import services
from envelopes.models import AuditEvent
from outbound.http import SEND_TIMEOUT
from tests.conftest import error_envelope
from tests.worker import Worker, wait_until
from webhooks.models import DeliveryTry, OutboxMessage
from webhooks.outbox import event_emit
from webhooks.services import endpoint_create

from .conftest import Receiver, TricklingReceiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker, pytest.mark.usefixtures("allow_private")]

LOCAL_RECEIVERS = {"HOLDPOINT_WEBHOOK_ALLOW_PRIVATE": "true"}


def on_time() -> float:
    """How late a timer may fire and still be on time, in seconds after its not_before: beat
    sweeps every 0.5 s here, and the embedded filesystem broker polls its folders every second
    (a real broker pushes). A timer that waited for a receiver's try would be ~10 s late."""
    return 4.0 if settings.CELERY_BROKER_URL.startswith("filesystem://") else 2.0


def waiting_step(team: Team, ref: str, not_before: datetime) -> None:
    body = error_envelope(
        operation_ref=ref,
        code="RATE_LIMITED",
        category="rate_limit",
        next_action="wait_and_retry",
        retry={"directive": "after_delay", "not_before": not_before.isoformat(), "max_attempts_remaining": 2},
        safe_details={},
    )
    services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode())


def emit(team: Team) -> None:
    with transaction.atomic():  # on commit: a delivery task on the `webhooks` queue
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "send_email"})


@pytest.fixture(autouse=True)
def _empty_queues() -> None:
    """Tasks an earlier run left in the broker (a delivery queued before the routes existed
    would land on `celery`) are not this test's."""
    from config.celery import app

    app.control.purge()


def fired_at(ref: str) -> datetime | None:
    event = AuditEvent.objects.filter(step__operation_ref=ref, reason="retry_window_open").first()
    return event.created_at if event else None


def test_timers_fire_on_time_while_a_receiver_trickles_its_answer(
    team: Team, trickling_receiver: TricklingReceiver
) -> None:
    trickling_receiver.interval = 1.0  # one byte a second for a minute: no read ever times out
    endpoint_create(team=team, url=trickling_receiver.url())
    start = timezone.now()
    due = {f"wait_{n}": start + timedelta(seconds=6 + 2 * n) for n in range(5)}  # 6 s .. 14 s from now
    for ref, not_before in due.items():
        waiting_step(team, ref, not_before)

    # The documented split: timers and beat on `celery`, deliveries on their own worker.
    with Worker(queues="celery", env=LOCAL_RECEIVERS), Worker(queues="webhooks", beat=False, env=LOCAL_RECEIVERS):
        emit(team)
        assert wait_until(lambda: all(fired_at(ref) for ref in due), timeout=60)
        late = {ref: (fired_at(ref) - not_before).total_seconds() for ref, not_before in due.items()}  # type: ignore[operator]
        assert all(0 <= lag <= on_time() for lag in late.values()), late
        # Meanwhile the slow receiver's tries (the event, and the steps' own state changes)
        # ended at their deadline, failed tries to retry.
        assert wait_until(lambda: DeliveryTry.objects.exists(), timeout=SEND_TIMEOUT + 20)
    tries = list(DeliveryTry.objects.all())
    for tried in tries:
        assert tried.status_code is None and tried.error.startswith(f"timeout: no answer within {SEND_TIMEOUT:g} s")
        assert tried.latency_ms is not None
        assert SEND_TIMEOUT * 1000 - 500 <= tried.latency_ms <= SEND_TIMEOUT * 1000 + 2000
    assert not OutboxMessage.objects.filter(status="delivered").exists()
    assert trickling_receiver.connections >= len(tries)


def test_the_default_worker_with_two_processes_fires_timers_on_time_beside_a_trickling_receiver(
    team: Team, trickling_receiver: TricklingReceiver
) -> None:
    """`celery -A config worker --beat` as deployed (prefork, here two processes): a try held by
    a slow receiver takes one process for at most its deadline; the other fires the timers."""
    trickling_receiver.interval = 1.0
    endpoint_create(team=team, url=trickling_receiver.url())
    start = timezone.now()
    due = {f"wait_{n}": start + timedelta(seconds=8 + 2 * n) for n in range(4)}
    for ref, not_before in due.items():
        waiting_step(team, ref, not_before)
    with Worker(pool="prefork", env=LOCAL_RECEIVERS):
        emit(team)
        assert wait_until(lambda: all(fired_at(ref) for ref in due), timeout=60)
        assert DeliveryTry.objects.exists() or trickling_receiver.connections >= 1
    late = {ref: (fired_at(ref) - not_before).total_seconds() for ref, not_before in due.items()}  # type: ignore[operator]
    assert all(0 <= lag <= on_time() for lag in late.values()), late


def test_the_default_worker_consumes_both_queues_it_delivers_and_fires_timers(team: Team, receiver: Receiver) -> None:
    endpoint_create(team=team, url=receiver.url())
    not_before = timezone.now() + timedelta(seconds=3)
    waiting_step(team, "default_worker", not_before)
    with Worker(env=LOCAL_RECEIVERS):  # `celery -A config worker --beat`, no -Q
        emit(team)
        assert wait_until(lambda: OutboxMessage.objects.filter(status="delivered").count() >= 1, timeout=40)
        assert wait_until(lambda: fired_at("default_worker") is not None, timeout=40)
    assert receiver.received
