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
    # An earlier test's cache failure (a cache table read without `db`) must not leave this
    # process treating the cache as down: these tests are of the cache's marks.
    monkeypatch.setattr(doorbell, "_cache_down_until", [0.0])
    monkeypatch.setattr(doorbell, "_local_marks", {})
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


class DownCache:
    """A cache whose server is down: every call fails, and is counted."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    add = get = set = delete = _fail


@pytest.fixture
def down_cache(published: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> DownCache:
    down = DownCache()
    monkeypatch.setattr(doorbell, "cache", down)
    monkeypatch.setattr(doorbell, "_local_marks", {})
    monkeypatch.setattr(doorbell, "_cache_down_until", [0.0])
    monkeypatch.setattr(doorbell, "_last_warning", [0.0])
    return down


def test_with_the_cache_down_a_burst_rings_once_and_asks_the_cache_once(
    down_cache: DownCache,
    published: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(doorbell, "_clock", lambda: 1000.0)
    rang = [doorbell.doorbell_ring(TASK, quiet_s=30) for _ in range(50)]
    assert rang == [True] + [False] * 49  # this process's mark stands in for the cache's
    assert len(published) == 1
    assert down_cache.calls == 1  # no failed round trip per commit
    warnings = [r for r in caplog.records if r.name == "outbound.doorbell"]
    assert len(warnings) == 1 and warnings[0].exc_info is None
    doorbell.doorbell_answered(TASK)  # the task started: the next ring goes
    assert doorbell.doorbell_ring(TASK, quiet_s=30)
    assert len(published) == 2


def test_with_the_cache_down_it_is_asked_again_after_a_pause(
    down_cache: DownCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [500.0]
    monkeypatch.setattr(doorbell, "_monotonic", lambda: clock[0])
    doorbell.doorbell_ring(TASK, quiet_s=30)
    assert down_cache.calls == 1
    clock[0] += doorbell.CACHE_RETRY_S - 0.1
    doorbell.doorbell_ring(TASK, quiet_s=30)
    assert down_cache.calls == 1
    clock[0] += 0.2
    doorbell.doorbell_ring(TASK, quiet_s=30)
    assert down_cache.calls == 2
