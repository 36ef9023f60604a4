"""Races with real threads and real transactions (run on PostgreSQL in CI)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Team
from approvals.services import DecisionRefused, step_decide
from envelopes import errors, services
from envelopes.audit import audit_verify
from envelopes.models import AuditEvent, Envelope, IdempotencyRecord, Step
from tests.conftest import AgentClient, error_envelope, fingerprint

pytestmark = pytest.mark.django_db(transaction=True)


def run_together(workers: list[Callable[[], Any]]) -> list[Any]:
    """Start every callable at the same moment in its own thread (and DB connection)."""
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)

    def run(index: int, work: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[index] = work()
        except Exception as error:
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, work)) for i, work in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_forty_concurrent_envelopes_for_one_new_ref_make_exactly_one_step(agent: AgentClient) -> None:
    bodies = [error_envelope(operation_ref="race/1", attempt=1, correlation_id=f"c-{n}") for n in range(40)]
    statuses = run_together(
        [lambda body=body: AgentClient(agent.raw_key).envelope(body).status_code for body in bodies]
    )
    assert statuses == [201] * 40
    assert Step.objects.filter(operation_ref="race/1").count() == 1
    assert Envelope.objects.count() == 40
    step = Step.objects.get()
    assert AuditEvent.objects.filter(step=step).count() == step.audit_seq
    assert audit_verify() == []


def test_concurrent_first_attempts_grant_exactly_one(agent: AgentClient) -> None:
    fp = fingerprint("input")
    results = run_together(
        [lambda: AgentClient(agent.raw_key).attempt("race/2", tool="send_email", fingerprint=fp).status_code] * 12
    )
    assert sorted(results) == [201] + [409] * 11
    assert Step.objects.get(operation_ref="race/2").attempts == 1


def test_two_sweepers_fire_each_due_timer_once(team) -> None:
    for n in range(60):
        body = error_envelope(
            operation_ref=f"sweep/{n}",
            code="RATE_LIMITED",
            category="rate_limit",
            next_action="wait_and_retry",
            retry={
                "directive": "after_delay",
                "not_before": (timezone.now() - timedelta(seconds=1)).isoformat(),
                "max_attempts_remaining": 2,
            },
            safe_details={},
        )
        services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode())

    def sweep() -> int:
        return sum(services.step_fire_timer(step_id=step_id) for step_id in services.due_step_ids())

    fired = run_together([sweep, sweep, sweep])
    assert sum(fired) == 60
    assert AuditEvent.objects.filter(reason="retry_window_open").count() == 60
    assert audit_verify() == []


def test_an_expiry_racing_an_approval_yields_one_transition(team, make_reviewer) -> None:
    reviewer = make_reviewer()
    body = error_envelope(
        tool="create_invoice",
        operation_ref="race/approval",
        code="MISSING_APPROVAL",
        category="authorization",
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="request_approval",
    )
    answer = services.envelope_ingest(
        team=team,
        payload=body,
        dialect="canonical",
        raw_body=json.dumps(body).encode(),
        now=timezone.now() - timedelta(days=2),
    )
    step_id = answer.step.pk

    def approve() -> str:
        try:
            step_decide(team=team, step_id=step_id, actor=reviewer, action="approve", reason="ok")
        except DecisionRefused:
            return "refused"
        return "approved"

    results = run_together([approve, lambda: services.step_fire_timer(step_id=step_id)])
    step = Step.objects.get(pk=step_id)
    transitions = AuditEvent.objects.filter(step=step, kind="transition").exclude(before="")
    assert transitions.count() == 1
    assert (step.state, step.reason) in {("retry_ready", "approved"), ("cancelled", "approval_expired")}
    assert (results[0] == "approved") == (step.reason == "approved")
    assert audit_verify() == []


def test_a_lapse_racing_the_attempt_that_would_use_the_approval_yields_one_outcome(team, make_reviewer) -> None:
    """The sweep cancels a lapsed approval while the agent asks the gate with the approved input:
    one transition, and never both a grant and a cancellation."""
    reviewer = make_reviewer()
    fp = fingerprint("refund 120")
    asked_at = timezone.now() - timedelta(days=3)
    services.attempt_request(
        team=team, operation_ref="race/lapse", tool_name="create_invoice", fingerprint=fp, now=asked_at
    )
    body = error_envelope(
        tool="create_invoice",
        operation_ref="race/lapse",
        code="MISSING_APPROVAL",
        category="authorization",
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="request_approval",
    )
    services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode())
    step = Step.objects.get(operation_ref="race/lapse")
    step_decide(team=team, step_id=step.pk, actor=reviewer, action="approve", reason="ok")
    # Approved two days ago: its lapse (the default approval_ttl_s, a day) has passed.
    Step.objects.filter(pk=step.pk).update(
        approved_at=F("approved_at") - timedelta(days=2),
        approval_lapses_at=F("approval_lapses_at") - timedelta(days=2),
        due_at=F("approval_lapses_at") - timedelta(days=2),
    )

    def ask() -> str:
        try:
            services.attempt_request(team=team, operation_ref="race/lapse", tool_name="create_invoice", fingerprint=fp)
        except errors.AttemptRefused as refused:
            return refused.code
        return "granted"

    results = run_together([ask, lambda: services.step_fire_timer(step_id=step.pk)])
    step.refresh_from_db()
    assert (step.state, step.reason, step.attempts) == ("cancelled", "approval_expired", 1)
    assert results[0] == "step_closed"
    lapses = AuditEvent.objects.filter(step=step, kind="transition", reason="approval_expired")
    assert lapses.count() == 1
    assert audit_verify() == []


def _step_needing_input(team: Team, ref: str) -> None:
    services.attempt_request(team=team, operation_ref=ref, tool_name="send_email", fingerprint=fingerprint("a"))
    services.envelope_ingest(
        team=team, payload=error_envelope(operation_ref=ref), dialect="canonical", raw_body=b"{}"
    )  # needs_input: a fixed input may be tried


def _hold_the_step_then_ingest(
    team: Team, ref: str, locked: threading.Event, written: dict[str, Any]
) -> threading.Thread:
    """A thread that locks the step, waits until another transaction waits for that lock, then
    ingests an envelope for it and commits; `written` gets "waited" and "envelope_id"."""

    def holder() -> None:
        from django.db import transaction

        try:
            with transaction.atomic():
                Step.objects.select_for_update().get(operation_ref=ref)
                locked.set()
                with connection.cursor() as cursor:  # until the other one waits for this lock
                    for _ in range(200):
                        cursor.execute("SELECT pg_stat_clear_snapshot()")  # else one snapshot per transaction
                        cursor.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND datname = current_database()"
                        )
                        written["waited"] = cursor.fetchone()[0] > 0
                        if written["waited"]:
                            break
                        time.sleep(0.05)
                answer = services.envelope_ingest(
                    team=team,
                    payload=error_envelope(operation_ref=ref, agent_message="the newest envelope"),
                    dialect="canonical",
                    raw_body=b"{}",
                )
                written["envelope_id"] = answer.envelope.pk
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    return thread


def _waiter(send: Callable[[], Any], locked: threading.Event, written: dict[str, Any]) -> Callable[[], Any]:
    """`send` once the step is locked by the holder; `written["reads"]` gets its FOR UPDATE reads."""

    def waiter() -> Any:
        assert locked.wait(10)
        try:
            with CaptureQueriesContext(connection) as queries:
                answer = send()
            written["reads"] = [q["sql"] for q in queries.captured_queries if "FOR UPDATE" in q["sql"]]
            return answer
        finally:
            connection.close()

    return waiter


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and their waits are PostgreSQL's")
def test_a_write_that_waited_for_the_steps_lock_keeps_what_the_other_wrote(agent: AgentClient, team) -> None:
    """A statement that waits for a row lock reads the locked row as the other transaction left
    it, but the rows it joins as they were before the wait: the step's context must not write
    back a stale join (the attempt once wrote `last_envelope_id = NULL` here)."""
    ref = "race/lock-wait"
    _step_needing_input(team, ref)
    locked = threading.Event()
    written: dict[str, Any] = {}

    def grant() -> Any:
        return services.attempt_request(
            team=team, operation_ref=ref, tool_name="send_email", fingerprint=fingerprint("b")
        )

    thread = _hold_the_step_then_ingest(team, ref, locked, written)
    results = run_together([_waiter(grant, locked, written)])
    thread.join(timeout=60)
    assert not thread.is_alive() and written["waited"]
    (grant,) = results
    assert not isinstance(grant, Exception), grant
    step = Step.objects.get(operation_ref=ref)
    assert step.last_envelope_id == written["envelope_id"]
    assert grant.step.last_envelope.pk == written["envelope_id"]  # the answer read it after the wait
    assert step.attempts == 2
    if connection.vendor == "postgresql":  # the context read saw it waited, and read again after the wait
        assert len(written["reads"]) == 2, written["reads"]
    assert audit_verify() == []


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and their waits are PostgreSQL's")
def test_a_keyed_write_that_waited_for_the_steps_lock_keeps_what_the_other_wrote(agent: AgentClient, team) -> None:
    """The same race with an Idempotency-Key, whose claim rides in the context read that waited
    (issue 29): the read after the wait carries no second claim, the step keeps the other's
    envelope, and the key's stored answer is the grant that was sent."""
    ref = "race/lock-wait-keyed"
    _step_needing_input(team, ref)
    locked = threading.Event()
    written: dict[str, Any] = {}

    def keyed_grant() -> Any:
        return AgentClient(agent.raw_key).attempt(
            ref, tool="send_email", fingerprint=fingerprint("b"), headers={"HTTP_IDEMPOTENCY_KEY": "k-wait"}
        )

    thread = _hold_the_step_then_ingest(team, ref, locked, written)
    (response,) = run_together([_waiter(keyed_grant, locked, written)])
    thread.join(timeout=60)
    assert not thread.is_alive() and written["waited"]
    assert not isinstance(response, Exception), response
    assert response.status_code == 201, response.content
    step = Step.objects.get(operation_ref=ref)
    assert (step.last_envelope_id, step.attempts) == (written["envelope_id"], 2)
    claims = [sql for sql in written["reads"] if "ON CONFLICT DO NOTHING" in sql]
    assert (len(written["reads"]), len(claims)) == (2, 1), written["reads"]
    stored = IdempotencyRecord.objects.get(key="k-wait")
    assert (stored.status, stored.response) == (201, response.json())
    assert audit_verify() == []
