"""Idempotency-Key under faults (contract §4 v1.1): a duplicate in flight is told when to come back,
and the work and the answer a replay gets commit together, so no crash leaves work done twice.

Real transactions (`transaction=True`): a crash is a process killed between the work and the
answer, and a slow first request is a thread holding its transaction open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from envelopes import api, idempotency, services
from envelopes.idempotency import IN_FLIGHT_TIMEOUT, body_fingerprint, idempotency_claim, in_flight_retry_after
from envelopes.models import AuditEvent, Envelope, IdempotencyRecord, Quarantine, Step, Tool
from tests import worker
from tests.conftest import AgentClient, error_envelope, fingerprint

pytestmark = pytest.mark.django_db(transaction=True)

BODY = json.dumps(error_envelope()).encode()


def _age_claims(seconds: float) -> None:
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(seconds=seconds))


# --- Retry-After --------------------------------------------------------------------------------


def test_a_duplicate_in_flight_is_409_with_retry_after(agent, team) -> None:
    idempotency_claim(team=team, endpoint="envelopes", key="k-1", body_sha256=body_fingerprint("canonical", BODY))
    response = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 409
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["code"] == "idempotency_request_in_flight"
    assert response["Retry-After"] == "1"
    assert Envelope.objects.count() == 0


def test_retry_after_grows_to_the_time_left_when_the_first_request_is_slow(agent, team) -> None:
    idempotency_claim(team=team, endpoint="envelopes", key="k-1", body_sha256=body_fingerprint("canonical", BODY))
    _age_claims(20)
    response = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 409
    assert 39 <= int(response["Retry-After"]) <= 41


def test_in_flight_retry_after_is_never_below_one_second() -> None:
    now = timezone.now()
    assert in_flight_retry_after(now, now) == 1
    assert in_flight_retry_after(now - timedelta(seconds=10), now) == 50
    assert in_flight_retry_after(now - timedelta(seconds=300), now) == 1


# --- the work and its answer, together ------------------------------------------------------------


def test_work_whose_answer_cannot_be_stored_is_rolled_back_and_done_once_on_retry(agent, monkeypatch) -> None:
    """A fault after the service and before the answer: nothing of the work remains."""

    def store_fails(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the database went away before the answer was stored")

    monkeypatch.setattr(api, "idempotency_store", store_fails)
    with pytest.raises(ConnectionError):
        agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-1")
    assert Envelope.objects.count() == 0
    assert Step.objects.count() == 0
    assert AuditEvent.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0  # released: the request may be sent again

    monkeypatch.undo()
    first = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-1")
    again = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert Envelope.objects.count() == 1


# The process dies at a point of the one transaction (the claim, the work, the answer, COMMIT):
# no exception handler, no rollback by Python; the database sees its connection drop.
CRASH = textwrap.dedent(
    """
    import os, sys
    import django

    django.setup()
    from django.test.utils import setup_test_environment
    from rest_framework.test import APIClient

    import envelopes.api
    import envelopes.services

    setup_test_environment()
    where, ingest, store = sys.argv[2], envelopes.services.envelope_ingest, envelopes.api.idempotency_store

    def die_in_the_work(**kwargs):  # after the claim, in the middle of the work's writes
        ingest(**kwargs)
        os._exit(70)

    def die_after_the_answer(*args, **kwargs):  # the answer stored, COMMIT not sent
        store(*args, **kwargs)
        os._exit(70)

    if where == "work":
        envelopes.services.envelope_ingest = die_in_the_work
    elif where == "answer":
        envelopes.api.idempotency_store = lambda *args, **kwargs: os._exit(70)
    else:
        envelopes.api.idempotency_store = die_after_the_answer
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + sys.argv[1])
    client.generic(
        "POST", "/api/v1/envelopes", sys.stdin.read(), content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-crash"
    )
    os._exit(0)
    """
)


@pytest.mark.parametrize("where", ["work", "answer", "commit"])
def test_a_process_killed_in_the_keyed_transaction_leaves_nothing_and_the_key_free(agent, where: str) -> None:
    """Issue 29: the claim is in the work's transaction, so a crash anywhere before its COMMIT
    takes the claim with the work: nothing to redo, nothing to wait out, and the retry, sent at
    once, does the work once."""
    env = {
        **os.environ,
        "DATABASE_URL": worker.test_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "false",
        "SECRET_KEY": "test-" + "x" * 60,
        "HOLDPOINT_HTTPS": "false",
    }
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH, agent.raw_key, where],
        input=BODY,
        cwd=worker.ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert crashed.returncode == 70, crashed.stderr.decode()[-2000:]
    assert IdempotencyRecord.objects.count() == 0
    assert Envelope.objects.count() == 0
    assert Step.objects.count() == 0
    assert AuditEvent.objects.count() == 0

    retried = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-crash")
    assert retried.status_code == 201, retried.content
    again = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-crash")
    assert (again.status_code, again.json(), again["Idempotent-Replayed"]) == (201, retried.json(), "true")
    assert Envelope.objects.count() == 1
    stored = IdempotencyRecord.objects.get()
    assert (stored.status, stored.response) == (201, retried.json())


def test_a_claim_committed_without_an_answer_is_in_flight_then_taken_over(agent, team) -> None:
    """A claim committed on its own (a version before issue 29 claimed in a transaction of its
    own; its process died before the work committed): 409 with Retry-After until
    IN_FLIGHT_TIMEOUT, then the next request takes it over and does the work once."""
    idempotency_claim(team=team, endpoint="envelopes", key="k-crash", body_sha256=body_fingerprint("canonical", BODY))
    claim = IdempotencyRecord.objects.get()
    assert claim.status is None

    early = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-crash")
    assert early.status_code == 409
    assert early.has_header("Retry-After")

    _age_claims(IN_FLIGHT_TIMEOUT.total_seconds() + 1)
    retried = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-crash")
    assert retried.status_code == 201, retried.content
    assert Envelope.objects.count() == 1
    stored = IdempotencyRecord.objects.get()
    assert (stored.status, stored.response) == (201, retried.json())


def test_every_committed_work_has_its_answer(agent) -> None:
    """Successes, refusals and rejected bodies alike: what the service wrote and the answer a
    replay gets are in the database together."""
    ref = "run_81/step_4"
    grant = agent.attempt(ref, tool="send_email", fingerprint=fingerprint("a"), headers={"HTTP_IDEMPOTENCY_KEY": "a-1"})
    refusal = agent.attempt(
        ref, tool="send_email", fingerprint=fingerprint("b"), headers={"HTTP_IDEMPOTENCY_KEY": "a-2"}
    )
    rejected = agent.envelope(error_envelope(operation_ref="r2", category="weather"), HTTP_IDEMPOTENCY_KEY="e-1")
    assert (grant.status_code, refusal.status_code, rejected.status_code) == (201, 409, 422)
    assert refusal.json()["code"] == "verification_required"
    answers = {record.key: record for record in IdempotencyRecord.objects.all()}
    assert {key: record.status for key, record in answers.items()} == {"a-1": 201, "a-2": 409, "e-1": 422}
    assert answers["a-2"].response == refusal.json()
    assert AuditEvent.objects.filter(kind=AuditEvent.Kind.REFUSAL).exists()
    assert Quarantine.objects.count() == 1

    replayed = agent.attempt(
        ref, tool="send_email", fingerprint=fingerprint("b"), headers={"HTTP_IDEMPOTENCY_KEY": "a-2"}
    )
    assert replayed.status_code == 409
    assert replayed["Idempotent-Replayed"] == "true"
    assert replayed.json() == refusal.json()


def test_a_slow_first_request_is_not_taken_over_after_the_claim_timeout(agent, monkeypatch) -> None:
    """Past IN_FLIGHT_TIMEOUT a claim is taken over only when no transaction holds it: a live
    request that is merely slow keeps it, and its duplicate never makes a second write. On
    PostgreSQL the duplicate is told 409 at once; SQLite lets one writer at a time, so there the
    duplicate waits for the first request and replays its answer."""
    inside, release = threading.Event(), threading.Event()
    ingest = services.envelope_ingest

    def slow_ingest(**kwargs: Any) -> Any:
        answer = ingest(**kwargs)
        if not inside.is_set():
            inside.set()
            release.wait(30)
        return answer

    monkeypatch.setattr(services, "envelope_ingest", slow_ingest)
    results: dict[str, Any] = {}

    def send(name: str) -> None:
        try:
            results[name] = AgentClient(agent.raw_key).envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-slow")
        finally:
            connection.close()

    first = threading.Thread(target=send, args=("first",))
    first.start()
    duplicate = threading.Thread(target=send, args=("duplicate",))
    try:
        assert inside.wait(30)
        # (Aging the claim row would wait for the first request's lock: age the rule instead.)
        monkeypatch.setattr(idempotency, "IN_FLIGHT_TIMEOUT", timedelta(0))
        duplicate.start()
        duplicate.join(2)
        if connection.vendor == "sqlite":
            assert duplicate.is_alive()  # waiting for the writer
        else:
            assert not duplicate.is_alive()
            assert results["duplicate"].status_code == 409
            assert results["duplicate"].json()["code"] == "idempotency_request_in_flight"
    finally:
        release.set()
        first.join(30)
        duplicate.join(30)
    assert results["first"].status_code == 201
    assert Envelope.objects.count() == 1
    if connection.vendor == "sqlite":
        assert results["duplicate"]["Idempotent-Replayed"] == "true"
        assert results["duplicate"].json() == results["first"].json()
    replay = agent.envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-slow")
    assert replay.json() == results["first"].json()


# --- a duplicate while the first runs (contract §4 v1.2) ------------------------------------------


def _in_the_first_request(monkeypatch, hold_s: float) -> threading.Event:
    """Make the first ingest hold its transaction open for `hold_s` once its work is done; the
    event is set when it is there."""
    inside = threading.Event()
    ingest = services.envelope_ingest

    def slow_ingest(**kwargs: Any) -> Any:
        answer = ingest(**kwargs)
        if not inside.is_set():
            inside.set()
            time.sleep(hold_s)
        return answer

    monkeypatch.setattr(services, "envelope_ingest", slow_ingest)
    return inside


def test_a_duplicate_that_arrives_while_the_first_finishes_gets_its_stored_answer(agent, monkeypatch) -> None:
    """The duplicate waits on the key's uncommitted claim (under a second here) and replays the
    first's answer instead of a 409: the work is done once."""
    inside = _in_the_first_request(monkeypatch, hold_s=0.3)
    results: dict[str, Any] = {}

    def send(name: str) -> None:
        try:
            results[name] = AgentClient(agent.raw_key).envelope(BODY, HTTP_IDEMPOTENCY_KEY="k-dup")
        finally:
            connection.close()

    first = threading.Thread(target=send, args=("first",))
    first.start()
    assert inside.wait(30)
    duplicate = threading.Thread(target=send, args=("duplicate",))
    duplicate.start()
    first.join(30)
    duplicate.join(30)
    assert results["first"].status_code == 201
    assert results["duplicate"].status_code == 201, results["duplicate"].content
    assert results["duplicate"]["Idempotent-Replayed"] == "true"
    assert results["duplicate"].json() == results["first"].json()
    assert Envelope.objects.count() == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="lock_timeout is PostgreSQL's")
def test_the_claims_one_second_wait_does_not_bound_the_works_own_locks(agent) -> None:
    """`lock_timeout` is set for the claim's statement alone: the work after it may wait longer
    than a second for a step that another transaction holds, as a plain call may."""
    assert agent.envelope(BODY).status_code == 201
    step = Step.objects.get()
    held, release = threading.Event(), threading.Event()

    def hold_the_step() -> None:
        try:
            with transaction.atomic():
                list(Step.objects.select_for_update().filter(pk=step.pk).values_list("pk", flat=True))
                held.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_step)
    holder.start()
    try:
        assert held.wait(30)
        threading.Timer(1.6, release.set).start()
        began = time.monotonic()
        keyed = agent.envelope(error_envelope(code="OTHER_CODE"), HTTP_IDEMPOTENCY_KEY="k-wait")
        waited = time.monotonic() - began
    finally:
        release.set()
        holder.join(30)
    assert keyed.status_code == 201, keyed.content
    assert waited >= 1.5
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"


def test_a_keyed_call_whose_work_runs_again_does_it_once(agent) -> None:
    """In the keyed transaction the work has no savepoint of its own: a work that raises inside
    it (here a tool never seen, registered between two runs) rolls all of it back and runs again
    with one (transitions.RunAgain). One envelope, one tool, one stored answer."""
    body = json.dumps(error_envelope(tool="brand_new_tool", operation_ref="new-tool/1")).encode()
    first = agent.envelope(body, HTTP_IDEMPOTENCY_KEY="k-new")
    again = agent.envelope(body, HTTP_IDEMPOTENCY_KEY="k-new")
    assert (first.status_code, again.status_code, again["Idempotent-Replayed"]) == (201, 201, "true")
    assert again.json() == first.json()
    assert Envelope.objects.filter(step__tool__name="brand_new_tool").count() == 1
    assert Tool.objects.filter(name="brand_new_tool").count() == 1
    assert IdempotencyRecord.objects.filter(key="k-new").count() == 1
