"""The doorbell: one rule for every task it rings (outbound.doorbell)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache

from outbound import doorbell

TASK = "notifications.tasks.notify"  # any registered task: its publish is caught below


@pytest.fixture
def published(db: None, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    # `db`: on the embedded default the mark lives in the cache table.
    from notifications.tasks import notify

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(notify, "apply_async", lambda **kwargs: calls.append(kwargs))
    doorbell.doorbell_answered(TASK)
    return calls


def test_a_ring_is_skipped_until_the_task_starts(published: list[dict[str, Any]]) -> None:
    assert doorbell.doorbell_ring(TASK, quiet_s=30)
    assert not doorbell.doorbell_ring(TASK, quiet_s=30)  # queued and not started: it sees this one
    doorbell.doorbell_answered(TASK)  # the task starts
    assert doorbell.doorbell_ring(TASK, quiet_s=30)
    assert published == [{"retry": False}, {"retry": False}]


def test_a_mark_ends_after_its_quiet_time(published: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(doorbell, "_clock", lambda: now[0])
    assert doorbell.doorbell_ring(TASK, quiet_s=5)
    now[0] += 4.9
    assert not doorbell.doorbell_ring(TASK, quiet_s=5)
    now[0] += 0.2
    assert doorbell.doorbell_ring(TASK, quiet_s=5)
    assert len(published) == 2


def test_a_ring_that_publishes_nothing_leaves_no_mark(db: None) -> None:
    # No such task: the ring fails (never raises), and the next ring must try again.
    assert not doorbell.doorbell_ring("nowhere.tasks.nothing", quiet_s=30)
    assert cache.get(doorbell.MARK_KEY.format("nowhere.tasks.nothing")) is None
