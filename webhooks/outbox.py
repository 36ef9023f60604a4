"""Writing events to the outbox, inside the caller's transaction."""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.utils import timezone

from config.celery import publish_hint
from envelopes import modelsql
from envelopes.after_response import on_commit_later
from envelopes.events import Fold

from .models import OutboxMessage, WebhookEndpoint

logger = logging.getLogger(__name__)


def event_emit(
    *,
    team_id: int,
    event_type: str,
    data: dict[str, Any] | Callable[[], dict[str, Any]],
    step_id: int | None = None,
) -> int:
    """Queue one message per active endpoint of the team; returns how many were queued.

    `data` may be a callable, built only when the team has endpoints. A body already built (the
    event stream's consumers get one) is written, on PostgreSQL, by one statement that reads
    the endpoints and inserts the messages. Once the caller's transaction commits, a delivery
    task is enqueued to cut the wait; the beat sweep delivers the messages anyway if that
    enqueue is lost. In a request the enqueue waits until the response is sent
    (envelopes.after_response)."""
    if connection.vendor == "postgresql" and not callable(data):
        queued = _queue_in_one_statement(team_id=team_id, event_type=event_type, data=data, step_id=step_id)
    else:
        queued = _queue(team_id=team_id, event_type=event_type, data=data, step_id=step_id)
    _queued(queued)
    return queued


def _body(event_type: str, data: dict[str, Any] | Callable[[], dict[str, Any]], now: Any) -> str:
    if callable(data):
        data = data()
    return json.dumps(
        {"type": event_type, "timestamp": now.isoformat().replace("+00:00", "Z"), "data": data},
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )


def _queue(
    *, team_id: int, event_type: str, data: dict[str, Any] | Callable[[], dict[str, Any]], step_id: int | None
) -> int:
    endpoint_ids = list(WebhookEndpoint.objects.filter(team_id=team_id, active=True).values_list("id", flat=True))
    if not endpoint_ids:
        return 0
    now = timezone.now()
    body = _body(event_type, data, now)
    OutboxMessage.objects.bulk_create(
        OutboxMessage(
            team_id=team_id,
            endpoint_id=endpoint_id,
            step_id=step_id,
            message_id="msg_" + uuid.uuid4().hex,
            event_type=event_type,
            body=body,
            next_try_at=now,
        )
        for endpoint_id in endpoint_ids
    )
    return len(endpoint_ids)


@functools.cache
def _insert_from_endpoints() -> tuple[str, tuple[Any, ...]]:
    """One INSERT ... SELECT writing a message per active endpoint of the team (on PostgreSQL):
    one round trip instead of reading the endpoints and then inserting, on every transition of
    every team (issue 14). Columns not set here take their model default as a parameter."""
    given = {"team": "%(team)s", "endpoint": "e.id", "step": "%(step)s", "event_type": "%(event_type)s"}
    given |= {"body": "%(body)s", "next_try_at": "%(now)s", "created_at": "%(now)s"}
    given["message_id"] = "'msg_' || replace(gen_random_uuid()::text, '-', '')"  # uuid4().hex's form
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
        f"WHERE e.team_id = %(team)s AND e.active ORDER BY e.id"
    )
    return sql, tuple(defaults)


def _queue_in_one_statement(
    *, team_id: int, event_type: str, data: dict[str, Any] | Callable[[], dict[str, Any]], step_id: int | None
) -> int:
    sql, params = _statement(team_id=team_id, event_type=event_type, data=data, step_id=step_id)
    return modelsql.execute_bound(sql, params)  # a prepared statement (envelopes.modelsql)


def _statement(
    *, team_id: int, event_type: str, data: dict[str, Any] | Callable[[], dict[str, Any]], step_id: int | None
) -> tuple[str, dict[str, Any]]:
    now = timezone.now()
    sql, defaults = _insert_from_endpoints()
    params: dict[str, Any] = {
        "team": team_id,
        "step": step_id,
        "event_type": event_type,
        "body": _body(event_type, data, now),
        "now": now,
    }
    for field in defaults:
        params[field.attname] = field.get_db_prep_save(field.get_default(), connection=connection)
    return sql, params


def event_fold(*, team_id: int, event_type: str, data: dict[str, Any], step_id: int | None = None) -> Fold | None:
    """`event_emit`'s work as one INSERT that the core's hot path runs inside the statement that
    writes the event (`envelopes.events.Fold`): the same messages, one round trip fewer on every
    transition an agent causes (issue 14). PostgreSQL only, as `_queue_in_one_statement`."""
    if connection.vendor != "postgresql":
        return None
    sql, params = _statement(team_id=team_id, event_type=event_type, data=data, step_id=step_id)
    return Fold(*modelsql.positional(f"{sql} RETURNING 1", params), written=_queued)


def _queued(count: int) -> None:
    if count:  # after commit, and after the response: the caller need not wait for it
        on_commit_later(enqueue_delivery)


# While this key exists a delivery task is queued and has not started yet: it will claim every
# message committed before it starts, so an event need not enqueue another. The task deletes
# the key as it starts (an event committed after that enqueues one more); the timeout ends a
# key whose task was lost. The cache is only a hint: without it, every event enqueues.
DELIVERY_PENDING_KEY = "holdpoint:webhooks:delivery-pending"
DELIVERY_PENDING_SECONDS = 30


def enqueue_delivery() -> None:
    """Ask a worker to deliver due messages now, unless a delivery task is already waiting to
    start: a burst of events enqueues one task, not one per event. Never raises: a broker
    outage must not break the request that emitted the event (the outbox row is already
    committed, and beat's sweep delivers it)."""
    try:
        if not _delivery_pending_mark():
            return
        from .tasks import deliver_due_messages

        if not publish_hint(deliver_due_messages):  # the broker is down: beat's sweep delivers
            delivery_pending_clear()  # nothing is queued: the next event must try again
    except Exception:
        delivery_pending_clear()
        logger.warning("could not enqueue webhook delivery; the sweep will send it", exc_info=True)


def _delivery_pending_mark() -> bool:
    """True when this caller should enqueue (it set the mark, or the cache cannot say)."""
    try:
        return bool(cache.add(DELIVERY_PENDING_KEY, 1, timeout=DELIVERY_PENDING_SECONDS))
    except Exception:
        logger.warning("the cache is unavailable; enqueueing webhook delivery unmarked", exc_info=True)
        return True


def delivery_pending_clear() -> None:
    """A delivery task has started (or none was queued): the next event enqueues again."""
    try:
        cache.delete(DELIVERY_PENDING_KEY)
    except Exception:
        logger.warning("the cache is unavailable; the delivery mark expires by itself", exc_info=True)
