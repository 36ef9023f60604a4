"""Issue 14: the agent API's hot statements are prepared, so PostgreSQL stops parsing and
planning them on every call (envelopes/modelsql.py), and the placeholders they are written with
become PostgreSQL's numbered ones."""

from __future__ import annotations

import pytest
from django.db import connection

from accounts import auth
from accounts.models import Team
from envelopes import modelsql
from tests.conftest import AgentClient, error_envelope, fingerprint
from webhooks.services import endpoint_create

CALLS = 4  # more than the connection's prepare_threshold (config/settings.py)


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")
def test_ingest_and_gate_statements_are_prepared_after_a_few_calls(agent: AgentClient, team: Team, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")
    for index in range(CALLS):
        auth._known.clear()  # read the key each time: with the Redis cache it is remembered
        assert agent.envelope(error_envelope(operation_ref=f"prep-{index}")).status_code == 201
        auth._known.clear()
        granted = agent.attempt(f"gate-{index}", tool="send_email", fingerprint=fingerprint(f"input-{index}"))
        assert granted.status_code == 201, granted.content

    prepared = _prepared_statements()
    tables = {
        "the key lookup": '"envelopes_apikey" k JOIN',
        "the context read": 'FROM "envelopes_tool" t LEFT JOIN LATERAL',
        "the step, audit link and envelope": 'INSERT INTO "envelopes_envelope"',
        "the step, audit link and attempt": 'INSERT INTO "envelopes_attempt"',
        "the webhook outbox": 'INSERT INTO "webhooks_outboxmessage"',
    }
    missing = [what for what, text in tables.items() if not any(text in statement for statement in prepared)]
    assert not missing, f"not prepared: {missing}; prepared: {prepared}"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")
def test_no_statement_is_prepared_when_prepared_statements_are_off(agent: AgentClient, team: Team) -> None:
    """HOLDPOINT_DB_PREPARED_STATEMENTS=false (for a pooler that cannot keep them): the same
    calls work and leave nothing prepared."""
    raw = connection.connection
    threshold, raw.prepare_threshold = raw.prepare_threshold, None
    try:
        for index in range(CALLS):
            assert agent.envelope(error_envelope(operation_ref=f"off-{index}")).status_code == 201
        assert _prepared_statements() == []
    finally:
        raw.prepare_threshold = threshold


def test_placeholders_are_numbered_once_per_name() -> None:
    text, names = modelsql._numbered("SELECT %(a)s, %(b)s WHERE x = %(a)s")
    assert (text, names) == ("SELECT $1, $2 WHERE x = $1", ("a", "b"))
    text, names = modelsql._numbered("INSERT INTO t (x, y) VALUES (%s, %s)")
    assert (text, names) == ("INSERT INTO t (x, y) VALUES ($1, $2)", ("", ""))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the hot path's writes are PostgreSQL's")
def test_the_values_of_a_write_are_those_save_sends(agent: AgentClient, team: Team) -> None:
    """modelsql hands plain values to the driver unchanged (no get_db_prep_save): for every
    column of the rows an ingest and a grant write, what it sends is what the field would."""
    from envelopes.events import DomainEvent
    from envelopes.models import Attempt, AuditEvent, Envelope, Step

    agent.envelope(error_envelope(operation_ref="values-1"))
    agent.attempt("values-2", tool="send_email", fingerprint=fingerprint("values-2"), input={"to": "x"})
    db = connection
    for model in (Step, AuditEvent, Envelope, DomainEvent, Attempt, Team):
        for instance in model.objects.all():
            fields = modelsql.column_fields(model)
            sent = modelsql._prepared(instance, fields)
            expected = [field.get_db_prep_save(getattr(instance, field.attname), connection=db) for field in fields]
            assert [_comparable(value) for value in sent] == [_comparable(value) for value in expected], model


def _comparable(value: object) -> object:
    """A psycopg Json/Jsonb wrapper compares by what it wraps."""
    return (type(value).__name__, value.obj) if hasattr(value, "obj") else value
