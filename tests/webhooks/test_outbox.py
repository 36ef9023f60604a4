"""The outbox: one message per active endpoint, written in the transition's transaction,
and a prompt delivery enqueued after commit that a broker outage cannot break."""

from __future__ import annotations

import logging

import pytest
from django.db import transaction

from accounts.models import Team
from config import celery as config_celery
from tests.conftest import error_envelope
from webhooks.models import OutboxMessage, WebhookEndpoint
from webhooks.outbox import enqueue_delivery, event_emit
from webhooks.services import endpoint_create
from webhooks.tasks import deliver_due_messages


def test_a_team_without_endpoints_queues_nothing_and_builds_no_body(team: Team) -> None:
    def build() -> dict:
        raise AssertionError("the body must not be built")

    assert event_emit(team_id=team.pk, event_type="tool.resumed", data=build) == 0
    assert not OutboxMessage.objects.exists()


def test_one_message_per_active_endpoint_with_distinct_webhook_ids(
    team: Team, allow_private: None, no_prompt_delivery: list[int]
) -> None:
    for port in (9001, 9002, 9003):
        endpoint_create(team=team, url=f"http://127.0.0.1:{port}/hook")
    WebhookEndpoint.objects.filter(url__contains="9003").update(active=False)
    assert event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"}) == 2
    messages = list(OutboxMessage.objects.all())
    assert len({m.message_id for m in messages}) == 2
    assert all(m.message_id.startswith("msg_") for m in messages)
    assert len({m.body for m in messages}) == 1


def test_the_message_rolls_back_with_the_transition(
    team: Team, endpoint: WebhookEndpoint, no_prompt_delivery: list[int]
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
        raise RuntimeError("the transition failed")
    assert not OutboxMessage.objects.exists()
    assert no_prompt_delivery == []


def test_delivery_is_enqueued_once_the_transition_commits(
    agent,
    endpoint: WebhookEndpoint,
    django_capture_on_commit_callbacks,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    sent: list[dict] = []
    monkeypatch.setattr("webhooks.tasks.deliver_due_messages.apply_async", lambda **kwargs: sent.append(kwargs))
    with django_capture_on_commit_callbacks(execute=True):
        assert agent.envelope(error_envelope()).status_code == 201
    assert sent and sent[0] == {"retry": False}


def test_a_broker_outage_never_breaks_ingest(
    agent,
    endpoint: WebhookEndpoint,
    django_capture_on_commit_callbacks,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    def broker_down(**kwargs: object) -> None:
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr("webhooks.tasks.deliver_due_messages.apply_async", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        response = agent.envelope(error_envelope())
    assert response.status_code == 201
    assert OutboxMessage.objects.filter(status="pending").count() == 1  # the sweep sends it


def test_enqueue_delivery_swallows_any_error(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    def boom(**kwargs: object) -> None:
        raise OSError("no route to broker")

    monkeypatch.setattr("webhooks.tasks.deliver_due_messages.apply_async", boom)
    with caplog.at_level(logging.WARNING, logger="holdpoint.broker"):
        enqueue_delivery()
    # The broker's failure (config.celery.publish_hint), not others the call may log (the
    # database cache, when this test has no database, says it is unavailable and that every
    # event enqueues).
    [record] = [r for r in caplog.records if r.name == "holdpoint.broker" and "cannot be reached" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "OSError: no route to broker" in record.getMessage()


def test_a_burst_of_events_enqueues_one_delivery_task_until_it_starts(
    team: Team, endpoint: WebhookEndpoint, django_capture_on_commit_callbacks, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    sent: list[dict] = []
    monkeypatch.setattr("webhooks.tasks.deliver_due_messages.apply_async", lambda **kwargs: sent.append(kwargs))
    monkeypatch.setattr("webhooks.delivery.deliver_due_messages", lambda: 0)
    for _ in range(50):
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    assert OutboxMessage.objects.count() == 50
    assert len(sent) == 1  # the queued task claims all fifty when it starts

    deliver_due_messages.apply()  # the task starts: an event committed now may be missed by it
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    assert len(sent) == 2


def test_a_failed_enqueue_leaves_no_mark_so_the_next_event_tries_again(db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # `db`: on the embedded default the cache is a table; without the database the cache is
    # down, no mark is ever set, and every event enqueues whether or not a failure clears it.
    calls: list[int] = []

    def broker_down(**kwargs: object) -> None:
        calls.append(1)
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr("webhooks.tasks.deliver_due_messages.apply_async", broker_down)
    enqueue_delivery()
    enqueue_delivery()  # within the pause after a failure (config.celery.publish_hint)
    assert len(calls) == 1
    monkeypatch.setattr(config_celery, "_broker_down_until", [0.0])  # the pause is over
    enqueue_delivery()
    assert len(calls) == 2


def test_without_a_cache_events_still_enqueue_about_once_a_second(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from outbound import doorbell

    sent: list[dict] = []
    clock = [1000.0]
    monkeypatch.setattr(doorbell, "_clock", lambda: clock[0])
    monkeypatch.setattr(doorbell, "_local_marks", {})
    monkeypatch.setattr(doorbell, "_cache_down_until", [0.0])

    def cache_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("redis down")

    monkeypatch.setattr("webhooks.tasks.deliver_due_messages.apply_async", lambda **kwargs: sent.append(kwargs))
    monkeypatch.setattr("outbound.doorbell.cache.add", cache_down)
    monkeypatch.setattr("outbound.doorbell.cache.add_or_get", cache_down, raising=False)  # Redis's one round trip
    monkeypatch.setattr("outbound.doorbell.cache.delete", cache_down)
    enqueue_delivery()
    enqueue_delivery()  # this process's own mark stands while the cache is down
    assert len(sent) == 1
    clock[0] += doorbell.LOCAL_QUIET_S + 0.1  # a delivery that started elsewhere cannot clear it
    enqueue_delivery()
    assert len(sent) == 2


def test_delivery_runs_on_its_own_queue_and_a_worker_without_q_consumes_both() -> None:
    from config.celery import app

    app.loader.import_default_modules()
    router = app.amqp.router
    assert router.route({}, "webhooks.tasks.deliver_due_messages")["queue"].name == "webhooks"
    assert router.route({}, "envelopes.tasks.sweep_due_steps")["queue"].name == "celery"
    assert router.route({}, "metrics.tasks.rollup_metrics")["queue"].name == "celery"
    # What `celery worker` without -Q consumes: all of them (notifications send on their own),
    # so the documented command still delivers.
    assert set(app.amqp.queues.consume_from) == {"celery", "webhooks", "notifications"}
