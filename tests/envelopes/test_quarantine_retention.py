"""Quarantined payloads are kept HOLDPOINT_QUARANTINE_RETENTION_DAYS, then purged by beat's
hourly task: an agent that keeps sending a broken body does not grow the table for ever."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from envelopes.models import Quarantine, Step
from envelopes.retention import quarantine_purge
from envelopes.tasks import purge_quarantine
from tests.conftest import AgentClient, error_envelope

pytestmark = pytest.mark.django_db


def rejected(agent: AgentClient, ref: str) -> None:
    assert agent.envelope(error_envelope(operation_ref=ref, category="weather")).status_code == 422


def test_payloads_older_than_the_retention_are_purged_and_newer_ones_kept(agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_QUARANTINE_RETENTION_DAYS = 30
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=31), tick=False):
        rejected(agent, "old/a")
        rejected(agent, "old/b")
        rejected(agent, "old/c")
    with time_machine.travel(now - timedelta(days=29), tick=False):
        rejected(agent, "recent")

    assert quarantine_purge(now=now, batch=2) == 3  # batches of two: the loop goes on until done
    assert list(Quarantine.objects.values_list("operation_ref", flat=True)) == ["recent"]
    # The steps they escalated keep their state; only the payloads go.
    assert Step.objects.get(operation_ref="old/a").reason == "malformed_envelope"
    assert purge_quarantine.apply().get() == 0


def test_the_retention_is_read_at_each_purge(agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    with time_machine.travel(timezone.now() - timedelta(days=3), tick=False):
        rejected(agent, "three_days_old")
    settings.HOLDPOINT_QUARANTINE_RETENTION_DAYS = 7
    assert quarantine_purge() == 0
    settings.HOLDPOINT_QUARANTINE_RETENTION_DAYS = 2
    assert quarantine_purge() == 1
    assert not Quarantine.objects.exists()
