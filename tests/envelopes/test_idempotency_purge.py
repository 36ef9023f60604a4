"""Stored Idempotency-Key answers are kept for HOLDPOINT_IDEMPOTENCY_TTL_HOURS, then forgotten
by beat's hourly purge: the table does not grow by a row per keyed request forever."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from envelopes.idempotency import idempotency_purge
from envelopes.models import IdempotencyRecord
from envelopes.tasks import purge_idempotency_keys
from tests.conftest import AgentClient, error_envelope

pytestmark = pytest.mark.django_db


def keyed(agent: AgentClient, key: str, **overrides: str):  # type: ignore[no-untyped-def]
    return agent.envelope(error_envelope(**overrides), HTTP_IDEMPOTENCY_KEY=key)


def test_answers_older_than_the_ttl_are_purged_and_newer_ones_kept(agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_IDEMPOTENCY_TTL_HOURS = 24
    now = timezone.now()
    with time_machine.travel(now - timedelta(hours=25), tick=False):
        assert keyed(agent, "old-1", operation_ref="run_1/a").status_code == 201
        assert keyed(agent, "old-2", operation_ref="run_1/b").status_code == 201
    with time_machine.travel(now - timedelta(hours=23), tick=False):
        assert keyed(agent, "recent", operation_ref="run_1/c").status_code == 201

    assert idempotency_purge(now=now, batch=1) == 2  # batches of one: the loop goes on until done
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["recent"]
    assert purge_idempotency_keys.apply().get() == 0


def test_a_purged_key_is_a_new_request_and_a_kept_one_still_replays(agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_IDEMPOTENCY_TTL_HOURS = 1
    with time_machine.travel(timezone.now() - timedelta(hours=2), tick=False):
        first = keyed(agent, "k", operation_ref="run_2/a")
    again = keyed(agent, "k", operation_ref="run_2/a")
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()

    idempotency_purge()
    reused = keyed(agent, "k", operation_ref="run_2/other")  # another body: 422 before the purge
    assert reused.status_code == 201
    assert not reused.has_header("Idempotent-Replayed")


def test_the_purge_walks_ids_and_leaves_what_follows_the_first_newer_answer(agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    """No index on the age: the purge reads batches in id order and stops after the first batch
    with an answer inside the TTL, so an older one after it waits for a later purge."""
    settings.HOLDPOINT_IDEMPOTENCY_TTL_HOURS = 24
    now = timezone.now()
    with time_machine.travel(now - timedelta(hours=30), tick=False):
        assert keyed(agent, "oldest", operation_ref="run_3/a").status_code == 201
    with time_machine.travel(now - timedelta(hours=1), tick=False):
        assert keyed(agent, "recent", operation_ref="run_3/b").status_code == 201
    with time_machine.travel(now - timedelta(hours=30), tick=False):
        assert keyed(agent, "late-old", operation_ref="run_3/c").status_code == 201

    assert idempotency_purge(now=now, batch=1) == 1
    assert sorted(IdempotencyRecord.objects.values_list("key", flat=True)) == ["late-old", "recent"]
    assert idempotency_purge(now=now + timedelta(hours=24), batch=1) == 2
