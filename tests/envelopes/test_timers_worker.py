"""Timers on a real Celery worker with beat: due times live in the database and a sweep
claims them, so a crash, a double fire or a broker outage loses or repeats nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.services import step_decide
from envelopes import services
from envelopes.audit import audit_verify
from envelopes.configuration import tool_configure
from envelopes.models import AuditEvent, Step
from tests.conftest import error_envelope, unknown_outcome
from tests.worker import Worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def ingest(team, body, *, now=None):  # type: ignore[no-untyped-def]
    return services.envelope_ingest(
        team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode(), now=now
    )


def rate_limited(ref: str, not_before) -> dict:  # type: ignore[no-untyped-def]
    return error_envelope(
        operation_ref=ref,
        code="RATE_LIMITED",
        category="rate_limit",
        next_action="wait_and_retry",
        retry={"directive": "after_delay", "not_before": not_before.isoformat(), "max_attempts_remaining": 2},
        safe_details={},
    )


def states(*refs: str) -> list[tuple[str, str]]:
    by_ref = {step.operation_ref: (step.state, step.reason) for step in Step.objects.filter(operation_ref__in=refs)}
    return [by_ref[ref] for ref in refs]


def test_a_real_worker_fires_each_kind_of_timer(team, make_reviewer) -> None:
    tool_configure(
        team=team,
        name="create_invoice",
        settings={"consistency_window_s": 0, "verification_deadline_s": 1, "approval_ttl_s": 1},
        actor="test",
    )
    ingest(team, rate_limited("wait", timezone.now() + timedelta(seconds=1)))
    ingest(team, unknown_outcome(tool="create_invoice", operation_ref="verify"))
    ingest(
        team,
        error_envelope(
            tool="create_invoice",
            operation_ref="approve",
            code="MISSING_APPROVAL",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        ),
    )
    # An approval no attempt uses lapses (contract §3 v1.2), from retry_ready.
    services.attempt_request(team=team, operation_ref="lapse", tool_name="create_invoice", fingerprint="a" * 64)
    ingest(
        team,
        error_envelope(
            tool="create_invoice",
            operation_ref="lapse",
            code="MISSING_APPROVAL",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        ),
    )
    step_decide(team=team, step_id=Step.objects.get(operation_ref="lapse").pk, actor=make_reviewer(), action="approve")
    assert states("lapse") == [("retry_ready", "approved")]
    with Worker():
        expected = [
            ("retry_ready", "retry_window_open"),
            ("escalated", "verification_timeout"),
            ("cancelled", "approval_expired"),
            ("cancelled", "approval_expired"),
        ]
        refs = ("wait", "verify", "approve", "lapse")
        assert wait_until(lambda: states(*refs) == expected, timeout=40), states(*refs)
    lapse = AuditEvent.objects.get(step__operation_ref="lapse", kind="transition", reason="approval_expired")
    assert (lapse.before, lapse.data["timer"]) == ("retry_ready", "approval_lapsed")
    assert audit_verify() == []


def test_a_worker_killed_mid_sweep_loses_and_repeats_nothing_after_a_restart(team) -> None:
    refs = [f"due_{n}" for n in range(400)]
    for ref in refs:
        ingest(team, rate_limited(ref, timezone.now() + timedelta(milliseconds=50)))
    fired = AuditEvent.objects.filter(kind="transition", reason="retry_window_open")
    worker = Worker(sweep_seconds=0.2).start()
    try:
        assert wait_until(lambda: fired.count() > 0, timeout=40)
        worker.kill()  # SIGKILL while the sweep is still working through the due steps
    finally:
        worker.kill()
    killed_at = fired.count()
    assert killed_at < len(refs), "the sweep finished before it could be killed; make it longer"
    with Worker(sweep_seconds=0.2):
        assert wait_until(lambda: fired.count() >= len(refs), timeout=60)
    assert Step.objects.filter(state="retry_ready").count() == len(refs)
    for step in Step.objects.filter(operation_ref__in=refs):
        assert AuditEvent.objects.filter(step=step, reason="retry_window_open").count() == 1
    assert audit_verify() == []


def test_ingest_answers_while_the_broker_is_down_and_the_due_work_runs_once_it_is_back(team, agent) -> None:
    from config.celery import app

    working_broker = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"  # nothing listens there
    try:
        body = rate_limited("offline", timezone.now() + timedelta(milliseconds=200))
        response = agent.envelope(body)
        assert response.status_code == 201
        assert response.json()["step"]["state"] == "waiting_retry"
    finally:
        app.conf.broker_url = working_broker
    with Worker():
        assert wait_until(lambda: states("offline") == [("retry_ready", "retry_window_open")], timeout=40)


def test_a_timer_firing_twice_moves_the_step_once(team) -> None:
    ingest(team, rate_limited("twice", timezone.now() - timedelta(seconds=1)))
    step = Step.objects.get(operation_ref="twice")
    assert services.step_fire_timer(step_id=step.pk) is True
    assert services.step_fire_timer(step_id=step.pk) is False
    assert AuditEvent.objects.filter(step=step, reason="retry_window_open").count() == 1
