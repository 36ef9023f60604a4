"""The core's domain-event stream: what happened to steps and tools, for the apps above.

The core writes one DomainEvent per change it makes (a step's state changed, a reviewer decided,
a tool halted or resumed) in the transaction of that change, then hands the event to every
consumer that subscribed (`subscribe`, from an app's `AppConfig.ready()`). A consumer writes its
own rows (an outbox, a watch) in that same transaction, so its work commits with the change or
not at all, and never runs a network call in the request. The core imports no consumer: a new
one (webhooks, notifications, ...) subscribes and changes nothing here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from .purging import purge_in_id_order

logger = logging.getLogger(__name__)

# A request for approval that its tool's escalate_after_s widened to the escalate_to group
# (contract §12): for the notifications, never a §5 webhook type.
APPROVERS_ESCALATED = "step.approvers_escalated"


class DomainEvent(models.Model):
    """One event of the core, append-only. `data` is the event's body as the consumers get it
    (for step events, the §4 step shape at the moment of the change)."""

    # team and step lead domainevent_team_idx and domainevent_step_idx: no lone indexes (0009).
    team = models.ForeignKey(
        "accounts.Team", on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    type = models.CharField(max_length=40)  # step.state_changed, step.decided, tool.halted, tool.resumed
    step = models.ForeignKey(
        "envelopes.Step", on_delete=models.CASCADE, null=True, blank=True, related_name="+", db_index=False
    )
    # The tool's name, "" when none (events carry names, not ids; a step event's tool is its step's).
    tool = models.CharField(max_length=100, blank=True)
    data = models.JSONField(encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # A consumer (or a reader) replaying a step's events in order.
            models.Index(fields=["step", "id"], name="domainevent_step_idx", condition=models.Q(step__isnull=False)),
            # A team's stream, newest first.
            models.Index(fields=["team", "-id"], name="domainevent_team_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.pk}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise ValueError("domain events are append-only")
        super().save(*args, **kwargs)


class Consumer(Protocol):
    """Called in the caller's transaction with the event's fields (`data` already built)."""

    def __call__(
        self, *, team_id: int, event_type: str, data: dict[str, Any], step_id: int | None = None
    ) -> object: ...


@dataclass(frozen=True)
class Fold:
    """A consumer's work for one event as a single INSERT (`%s` placeholders, ending in
    RETURNING), which the core's writer on PostgreSQL runs inside the statement that writes the event: one
    round trip for both. `written` is then called, in the transaction, with the rows it wrote."""

    sql: str
    params: list[Any]
    written: Callable[[int], object]


class Folder(Protocol):
    """A consumer's work as a Fold, or None when it cannot be one (the consumer is called then)."""

    def __call__(
        self, *, team_id: int, event_type: str, data: dict[str, Any], step_id: int | None = None
    ) -> Fold | None: ...


_consumers: list[Consumer] = []
_folders: dict[Consumer, Folder] = {}


def subscribe(handler: Consumer, *, fold: Folder | None = None) -> Consumer:
    """Register a consumer (once; subscribing it again changes nothing). Returns it, so it can
    decorate. `fold`, when given, does the handler's work as one statement (a `Fold`) for the
    core's writer on PostgreSQL (`folder_of`); every other writer of events calls the handler."""
    if handler not in _consumers:
        _consumers.append(handler)
    if fold is not None:
        _folders[handler] = fold
    return handler


def consumers() -> tuple[Consumer, ...]:
    return tuple(_consumers)


def folder_of(consumer: Consumer) -> Folder | None:
    return _folders.get(consumer)


def _tool_name(event_type: str, data: dict[str, Any]) -> str | None:
    if event_type.startswith("tool."):
        return data.get("tool")
    step = data.get("step")
    return step.get("tool") if isinstance(step, dict) else None


def event_emit(
    *,
    team_id: int,
    event_type: str,
    data: dict[str, Any] | Callable[[], dict[str, Any]],
    step_id: int | None = None,
) -> int:
    """Append the event in the caller's transaction and hand it to every consumer; returns the
    event's id. `data` may be a callable (built once here, for all consumers)."""
    if callable(data):
        data = data()
    event = DomainEvent(
        team_id=team_id,
        type=event_type,
        step_id=step_id,
        tool=_tool_name(event_type, data) or "",
        data=data,
        created_at=timezone.now(),
    )
    event.save(force_insert=True)
    for consumer in _consumers:
        consumer(team_id=team_id, event_type=event_type, data=data, step_id=step_id)
    return event.pk


# --- retention -----------------------------------------------------------------------------------
#
# Every consumer subscribed today does its work in the transaction that writes the event (webhooks
# its outbox rows, notifications its notices and watches, each with its own copy of what it needs):
# once an event is committed, they are done with it, and nothing reads the table later. So beat
# deletes events older than HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS (read at each purge) without
# asking them. A consumer that reads the stream after the fact instead registers with
# `keep_unread`, and no event from its oldest unread one on is ever deleted.

_unread: list[Callable[[], int | None]] = []

PURGE_BATCH = 1000


def keep_unread(oldest_unread: Callable[[], int | None]) -> Callable[[], int | None]:
    """Register a consumer that reads events after their transaction: `oldest_unread()` is the id
    of the oldest event it has not processed yet (None: none). Returns it, so it can decorate."""
    if oldest_unread not in _unread:
        _unread.append(oldest_unread)
    return oldest_unread


def domain_event_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """Delete events older than the retention that no consumer still needs, a batch per
    statement, oldest first (`purging`: in id order, no index on created_at); returns how many."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS)
    floors = [pk for pk in (oldest() for oldest in _unread) if pk is not None]
    events = DomainEvent.objects.all()
    if floors:
        events = events.filter(pk__lt=min(floors))
    return purge_in_id_order(events, written="created_at", cutoff=cutoff, batch=batch)
