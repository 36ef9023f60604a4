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
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from envelopes import api, idempotency, services
from envelopes.idempotency import IN_FLIGHT_TIMEOUT, body_fingerprint, idempotency_claim, in_flight_retry_after
from envelopes.models import AuditEvent, Envelope, IdempotencyRecord, Quarantine, Step
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


CRASH_AT_THE_ANSWER = textwrap.dedent(
    """
    import os, sys
    import django

    django.setup()
    from django.test.utils import setup_test_environment
    from rest_framework.test import APIClient

    import envelopes.api

    setup_test_environment()
    # The process dies after the service did its work, before the answer is stored: no
    # exception handler, no rollback by Python; the database sees its connection drop.
    envelopes.api.idempotency_store = lambda *args, **kwargs: os._exit(70)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + sys.argv[1])
    client.generic(
        "POST", "/api/v1/envelopes", sys.stdin.read(), content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-crash"
    )
    os._exit(0)
    """
)


def test_a_process_killed_between_the_work_and_the_answer_leaves_no_work_to_redo(agent) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": worker.test_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "false",
        "SECRET_KEY": "test-" + "x" * 60,
        "HOLDPOINT_HTTPS": "false",
    }
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_AT_THE_ANSWER, agent.raw_key],
        input=BODY,
        cwd=worker.ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert crashed.returncode == 70, crashed.stderr.decode()[-2000:]
    # The claim stayed behind (nobody released it), and the work went with the connection.
    claim = IdempotencyRecord.objects.get()
    assert claim.status is None
    assert Envelope.objects.count() == 0
    assert Step.objects.count() == 0

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
