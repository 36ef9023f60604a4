"""Asking a worker to send: at most one broker publish a second per process."""

from __future__ import annotations

from typing import Any

import pytest

from notifications import consumer
from notifications.tasks import notify
from outbound import doorbell


@pytest.fixture
def published(db: None, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    # `db`: on the embedded default the doorbell's mark lives in the cache table.
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(notify, "apply_async", lambda **kwargs: calls.append(kwargs))
    consumer.notify_started()  # no mark left by an earlier test
    return calls


def test_a_burst_of_held_steps_publishes_one_send_task_a_second(
    published: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(doorbell, "_clock", lambda: now[0])

    for _ in range(50):  # fifty commits within the same instant
        consumer.enqueue_notify()
    assert len(published) == 1

    now[0] += 0.9
    consumer.enqueue_notify()
    assert len(published) == 1

    now[0] += 0.2  # over a second since the one publish
    consumer.enqueue_notify()
    assert len(published) == 2


def test_a_broker_that_refuses_never_fails_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> None:
        raise ConnectionError("broker down")

    monkeypatch.setattr(notify, "apply_async", refuse)
    consumer.notify_started()
    consumer.enqueue_notify()  # logs a warning; beat's sweep sends the notices


def test_after_a_refused_publish_none_is_tried_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each publish while the broker is down would pay its failure again: after one, the
    process leaves the work to beat's sweep for RETRY_BROKER_AFTER_S."""
    from config import celery as config_celery

    tries: list[int] = []

    def refuse(**_: Any) -> None:
        tries.append(1)
        raise ConnectionError("broker down")

    monkeypatch.setattr(notify, "apply_async", refuse)
    now = [1000.0]
    monkeypatch.setattr(doorbell, "_clock", lambda: now[0])
    consumer.notify_started()
    for _ in range(3):
        consumer.enqueue_notify()
        now[0] += 1.1  # past the one-a-second gap
    assert tries == [1]

    config_celery._broker_down_until[0] = 0.0  # the interval is over
    monkeypatch.setattr(notify, "apply_async", lambda **kwargs: tries.append(2))
    consumer.enqueue_notify()
    assert tries == [1, 2]
