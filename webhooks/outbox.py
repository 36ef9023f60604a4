"""Writing events to the outbox, inside the caller's transaction: one statement, everywhere.

The outbox's whole write is one INSERT ... SELECT that reads the team's active endpoints and
writes a message for each (`event_fold`). The core's PostgreSQL writer runs it inside the
statement that writes the event (`envelopes.events.Fold`); everywhere else the consumer
(`event_emit`) runs the same statement on its own. Only how a random message id is spelled
differs between the databases.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.utils import timezone

from envelopes import modelsql
from envelopes.after_response import on_commit_later
from envelopes.events import Fold
from envelopes.rfc3339 import rfc3339
from outbound.doorbell import doorbell_answered, doorbell_ring

from .models import OutboxMessage, WebhookEndpoint

DELIVERY_TASK = "webhooks.tasks.deliver_due_messages"
# The queued task claims every message committed before it starts: a burst of events rings once.
DELIVERY_PENDING_SECONDS = 30
# The event types a webhook carries (contract §5); the core's other events are for its consumers.
WEBHOOK_TYPES = frozenset({"step.state_changed", "step.decided", "tool.halted", "tool.resumed"})


def event_emit(
    *,
    team_id: int,
    event_type: str,
    data: dict[str, Any] | Callable[[], dict[str, Any]],
    step_id: int | None = None,
) -> int:
    """Queue one message per active endpoint of the team; returns how many were queued.

    `data` may be a callable, built only when the team has endpoints. Once the caller's
    transaction commits, a delivery task is enqueued to cut the wait; the beat sweep delivers
    the messages anyway if that enqueue is lost. In a request the enqueue waits until the
    response is sent (envelopes.after_response)."""
    if event_type not in WEBHOOK_TYPES:
        return 0
    if callable(data):
        if not WebhookEndpoint.objects.filter(team_id=team_id, active=True).exists():
            return 0  # no body is built for a team that has nowhere to send it
        data = data()
    fold = event_fold(team_id=team_id, event_type=event_type, data=data, step_id=step_id)
    assert fold is not None  # a webhook type
    queued = _run(fold)
    fold.written(queued)
    return queued


def _run(fold: Fold) -> int:
    """The fold's statement on its own; how many messages it wrote (one row returned each)."""
    if connection.vendor == "postgresql":
        return modelsql.execute_bound(fold.sql, fold.params)  # a prepared statement (envelopes.modelsql)
    with connection.cursor() as cursor:  # SQLite counts RETURNING's rows only once they are read
        cursor.execute(fold.sql, fold.params)
        return len(cursor.fetchall())


def _body(event_type: str, data: dict[str, Any], now: Any) -> str:
    return json.dumps(
        {"type": event_type, "timestamp": rfc3339(now), "data": data},
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )


# A random message id per row, in uuid4().hex's form (32 hex digits), as each database spells it.
RANDOM_HEX = {
    "postgresql": "replace(gen_random_uuid()::text, '-', '')",
    "sqlite": "lower(hex(randomblob(16)))",
}


@functools.cache
def _insert_from_endpoints(vendor: str) -> tuple[str, tuple[Any, ...]]:
    """One INSERT ... SELECT writing a message per active endpoint of the team, one round trip
    on every transition of every team. Columns not set here take their model default as a
    parameter."""
    given = {"team": "%(team)s", "endpoint": "e.id", "step": "%(step)s", "event_type": "%(event_type)s"}
    given |= {"body": "%(body)s", "next_try_at": "%(now)s", "created_at": "%(now)s"}
    given["message_id"] = f"'msg_' || {RANDOM_HEX[vendor]}"
    quote = connection.ops.quote_name
    columns, values, defaults = [], [], []
    for field in OutboxMessage._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(quote(field.column or field.attname))
        if field.name in given:
            values.append(given[field.name])
        else:
            values.append(f"%({field.attname})s")
            defaults.append(field)
    sql = (
        f"INSERT INTO {quote(OutboxMessage._meta.db_table)} ({', '.join(columns)}) "  # noqa: S608 (names only)
        f"SELECT {', '.join(values)} FROM {quote(WebhookEndpoint._meta.db_table)} e "
        f"WHERE e.team_id = %(team)s AND e.active ORDER BY e.id RETURNING 1"
    )
    return sql, tuple(defaults)


def _statement(
    *, team_id: int, event_type: str, data: dict[str, Any], step_id: int | None
) -> tuple[str, dict[str, Any]]:
    now = timezone.now()
    sql, defaults = _insert_from_endpoints(connection.vendor)
    params: dict[str, Any] = {
        "team": team_id,
        "step": step_id,
        "event_type": event_type,
        "body": _body(event_type, data, now),
        "now": OutboxMessage._meta.get_field("created_at").get_db_prep_save(now, connection=connection),
        **_constant_defaults(connection.vendor),
    }
    for field in defaults:
        if _default_per_call(field):
            params[field.attname] = field.get_db_prep_save(field.get_default(), connection=connection)
    return sql, params


def _default_per_call(field: Any) -> bool:
    """A default that is a callable, such as `timezone.now`; a value, or no default at all (None
    or ""), is the same on every run."""
    return bool(field.has_default()) and callable(field.default)


@functools.cache
def _constant_defaults(vendor: str) -> dict[str, Any]:
    """`_insert_from_endpoints`'s other columns whose default is the same on every run, prepared
    once."""
    _, defaults = _insert_from_endpoints(vendor)
    return {
        field.attname: field.get_db_prep_save(field.get_default(), connection=connection)
        for field in defaults
        if not _default_per_call(field)
    }


def event_fold(*, team_id: int, event_type: str, data: dict[str, Any], step_id: int | None = None) -> Fold | None:
    """`event_emit`'s work as its one INSERT (`envelopes.events.Fold`), which the core's
    PostgreSQL writer runs inside the statement that writes the event, and `event_emit` runs
    on its own: the same messages either way. None for an event no webhook carries."""
    if event_type not in WEBHOOK_TYPES:
        return None
    sql, params = _statement(team_id=team_id, event_type=event_type, data=data, step_id=step_id)
    return Fold(*modelsql.positional(sql, params), written=_queued)


def _queued(count: int) -> None:
    if count:  # after commit, and after the response: the caller need not wait for it
        on_commit_later(enqueue_delivery)


def enqueue_delivery() -> None:
    """Ask a worker to deliver due messages now (outbound.doorbell: a burst of events rings
    once until the task starts). Never raises: the outbox rows are committed, and beat's sweep
    delivers them if the broker is down."""
    doorbell_ring(DELIVERY_TASK, quiet_s=DELIVERY_PENDING_SECONDS)


def delivery_pending_clear() -> None:
    """A delivery task has started: the next event rings again."""
    doorbell_answered(DELIVERY_TASK)
