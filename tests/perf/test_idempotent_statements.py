"""Issues 14 and 29: what an Idempotency-Key costs an agent's call (the SDK's guard and
holdpoint-mcp send one on every gate and envelope): since issue 29 the claim is one statement in
the work's own transaction, which stores the answer and waits for the disk once.

Real transactions (`transaction=True`): the request's BEGIN and COMMIT are the real ones."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Team
from envelopes.models import IdempotencyRecord
from tests.conftest import AgentClient, error_envelope, fingerprint
from tests.perf.rows import door
from webhooks.services import endpoint_create

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the hot path runs on PostgreSQL only"),
]

# After the door (rows.door: the key and the throttle): BEGIN, the context read with the claim
# in its statement (idempotency.claimed_first), the write with the outbox and the stored answer
# in its statement (modelsql.writes_held), COMMIT: what a plain call sends. Issue 14 had 9 (the
# claim in a transaction of its own, its hold, SAVEPOINT and RELEASE); issue 29 first had 6.
IDEMPOTENT_MAX = 4


def _answer_in_the_write(captured: CaptureQueriesContext) -> None:
    """The stored answer is sent in the statement that writes the step, not after it."""
    table = IdempotencyRecord._meta.db_table
    answers = [q["sql"] for q in captured.captured_queries if f'UPDATE "{table}"' in q["sql"]]
    assert len(answers) == 1, answers
    assert 'INTO "envelopes_step"' in answers[0] or 'UPDATE "envelopes_step"' in answers[0], answers[0][:200]


@pytest.fixture
def endpoint(team: Team, settings, monkeypatch):  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    # The delivery's enqueue runs after the response (tests/envelopes/test_after_response.py);
    # with the database cache its pending mark is SQL, which the test client would count here.
    monkeypatch.setattr("webhooks.outbox.enqueue_delivery", lambda: None)
    return endpoint_create(team=team, url="http://127.0.0.1:9/hook").endpoint


def test_an_ingest_with_a_key_is_at_most_4_statements_past_the_door_and_replays(agent: AgentClient, endpoint) -> None:  # type: ignore[no-untyped-def]
    agent.envelope(error_envelope(operation_ref="warm-up"), HTTP_IDEMPOTENCY_KEY="k0")

    with CaptureQueriesContext(connection) as captured:
        first = agent.envelope(error_envelope(operation_ref="new-1"), HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == 201, first.content
    assert len(captured.captured_queries) <= IDEMPOTENT_MAX + door(), [q["sql"][:80] for q in captured.captured_queries]
    claims = [q["sql"] for q in captured.captured_queries if "ON CONFLICT DO NOTHING" in q["sql"]]
    # In the work's transaction since issue 29, the claim leaves its commit to wait for the disk.
    assert len(claims) == 1 and "synchronous_commit" not in claims[0]
    assert "FOR UPDATE" in claims[0]  # the claim is made in the step's context read
    _answer_in_the_write(captured)

    again = agent.envelope(error_envelope(operation_ref="new-1"), HTTP_IDEMPOTENCY_KEY="k1")
    assert (again.status_code, again.json(), again["Idempotent-Replayed"]) == (201, first.json(), "true")
    record = IdempotencyRecord.objects.get(key="k1")
    assert (record.status, record.response) == (201, first.json())


def test_a_grant_with_a_key_is_at_most_4_statements_past_the_door(agent: AgentClient, endpoint) -> None:  # type: ignore[no-untyped-def]
    agent.attempt("warm-up", tool="send_email", fingerprint=fingerprint("w"), headers={"HTTP_IDEMPOTENCY_KEY": "g0"})

    with CaptureQueriesContext(connection) as captured:
        granted = agent.attempt(
            "gate-1", tool="send_email", fingerprint=fingerprint("g"), headers={"HTTP_IDEMPOTENCY_KEY": "g1"}
        )
    assert granted.status_code == 201, granted.content
    assert len(captured.captured_queries) <= IDEMPOTENT_MAX + door(), [q["sql"][:80] for q in captured.captured_queries]
    _answer_in_the_write(captured)


def test_a_keyed_call_leaves_synchronous_commit_as_configured(agent: AgentClient, team: Team) -> None:
    """The claim shares the work's commit, which must wait for the disk: it sets no
    `synchronous_commit` (the first test), and the connection keeps it as configured."""
    assert agent.envelope(error_envelope(operation_ref="sync-1"), HTTP_IDEMPOTENCY_KEY="s1").status_code == 201
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
