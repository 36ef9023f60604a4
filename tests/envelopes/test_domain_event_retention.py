"""The core's domain events are kept HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS, then purged by beat's
hourly task, in batches; what the consumers made of them (webhook outbox rows, notifications)
stays, and an event a consumer registered with `keep_unread` has not read yet is never deleted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings as django_settings
from django.utils import timezone

from envelopes import events
from envelopes.events import DomainEvent, domain_event_purge, keep_unread
from envelopes.models import Step
from envelopes.tasks import purge_domain_events
from tests.conftest import AgentClient, error_envelope
from webhooks.models import OutboxMessage
from webhooks.services import endpoint_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_enqueue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("webhooks.outbox.enqueue_delivery", lambda: None)


@pytest.fixture
def readers() -> Iterator[list[Any]]:
    """The `keep_unread` registrations made by a test, removed after it."""
    before = list(events._unread)
    yield events._unread
    events._unread[:] = before


def held(agent: AgentClient, ref: str) -> None:
    assert agent.envelope(error_envelope(operation_ref=ref)).status_code == 201


def test_events_older_than_the_retention_are_purged_and_what_consumers_made_of_them_stays(
    agent: AgentClient, team: Any, settings: Any
) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    settings.HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS = 30
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=31), tick=False):
        for ref in ("old/a", "old/b", "old/c"):
            held(agent, ref)
    with time_machine.travel(now - timedelta(days=29), tick=False):
        held(agent, "recent")
    assert DomainEvent.objects.count() == 4
    outbox = OutboxMessage.objects.count()
    assert outbox == 4  # the webhook consumer wrote its rows in each event's transaction

    assert domain_event_purge(now=now, batch=2) == 3  # batches of two: the loop goes on until done

    assert [event.data["step"]["operation_ref"] for event in DomainEvent.objects.all()] == ["recent"]
    assert OutboxMessage.objects.count() == outbox
    assert Step.objects.get(operation_ref="old/a").state == "needs_input"
    assert purge_domain_events.apply().get() == 0


def test_the_purge_stops_at_the_first_event_inside_the_retention(agent: AgentClient, settings: Any) -> None:
    settings.HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS = 7
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=8), tick=False):
        held(agent, "old/a")
    with time_machine.travel(now - timedelta(days=1), tick=False):
        held(agent, "new/b")
    with time_machine.travel(now - timedelta(days=8), tick=False):
        held(agent, "late/c")  # written after a newer one (a clock step): kept until the next walk passes it

    assert domain_event_purge(now=now, batch=1) == 1

    assert DomainEvent.objects.count() == 2


def test_the_retention_is_read_at_each_purge(agent: AgentClient, settings: Any) -> None:
    with time_machine.travel(timezone.now() - timedelta(days=3), tick=False):
        held(agent, "three_days_old")
    settings.HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS = 7
    assert domain_event_purge() == 0
    settings.HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS = 2
    assert domain_event_purge() == 1
    assert not DomainEvent.objects.exists()


def test_an_event_a_later_reader_has_not_read_is_never_purged(
    agent: AgentClient, settings: Any, readers: list[Any]
) -> None:
    settings.HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS = 1
    with time_machine.travel(timezone.now() - timedelta(days=10), tick=False):
        for ref in ("read/a", "unread/b", "unread/c"):
            held(agent, ref)
    first_unread = DomainEvent.objects.get(data__step__operation_ref="unread/b").pk
    position = {"oldest": first_unread}
    keep_unread(lambda: position["oldest"])
    keep_unread(lambda: None)  # a reader with nothing pending holds nothing back

    assert domain_event_purge(batch=1) == 1
    assert DomainEvent.objects.filter(pk__gte=first_unread).count() == 2

    position["oldest"] = None  # it caught up
    assert domain_event_purge() == 2


def test_beat_runs_the_purge_hourly() -> None:
    entry = django_settings.CELERY_BEAT_SCHEDULE["purge-domain-events"]
    assert entry == {"task": "envelopes.tasks.purge_domain_events", "schedule": 3600.0}
    assert django_settings.HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS == 30
