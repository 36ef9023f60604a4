"""Asking a worker to send: at most one broker publish a second per process."""

from __future__ import annotations

from typing import Any

import pytest

from notifications import consumer
from notifications.tasks import notify


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(notify, "apply_async", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(consumer, "_last_enqueue", [-consumer.ENQUEUE_GAP_S])
    return calls


def test_a_burst_of_held_steps_publishes_one_send_task_a_second(
    published: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(consumer, "_clock", lambda: now[0])

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
    monkeypatch.setattr(consumer, "_last_enqueue", [-consumer.ENQUEUE_GAP_S])
    consumer.enqueue_notify()  # logs a warning; beat's sweep sends the notices
