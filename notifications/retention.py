"""How long the notifications history is kept (like webhooks.retention).

Every held step writes a notice per channel, every flush a message, every try a row, every
announcement a watch: without a purge these tables grow for ever. Beat purges hourly, in
batches (no transaction holds many rows), everything older than
HOLDPOINT_NOTIFICATION_RETENTION_DAYS (default 30, read at each call) that is finished:
- messages sent, dead or dropped (by when they were written), with their tries and the notices
  they carried (the step page's "notified <channel>" entries go with them);
- notices dropped before any message carried them;
- watches that owe nothing more (no reminder, warning or escalation is due).
Nothing pending is purged: a waiting notice, a message still being sent, a watch still due.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from .models import Message, Notice, Watch

PURGE_BATCH = 1000
FINISHED = (Message.Status.SENT, Message.Status.DEAD, Message.Status.DROPPED)


def _cutoff(now: datetime | None) -> datetime:
    return (now or timezone.now()) - timedelta(days=settings.HOLDPOINT_NOTIFICATION_RETENTION_DAYS)


def _batches(rows: QuerySet[Any], order: str, *, batch: int) -> Iterator[list[int]]:
    while True:
        ids = list(rows.order_by(order).values_list("pk", flat=True)[:batch])
        if ids:
            yield ids
        if len(ids) < batch:
            return


def messages_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """Forget finished messages written before the cutoff, with their tries and notices;
    returns how many messages."""
    finished = Message.objects.filter(status__in=FINISHED, created_at__lt=_cutoff(now))
    purged = 0
    for ids in _batches(finished, "created_at", batch=batch):
        # The notices first, so deleting the messages updates none of them (SET_NULL).
        Notice.objects.filter(message_id__in=ids).delete()
        purged += Message.objects.filter(pk__in=ids).delete()[1].get(Message._meta.label, 0)
    return purged


def dropped_notices_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """Forget notices dropped (their step moved on first) before the cutoff."""
    dropped = Notice.objects.filter(status=Notice.Status.DROPPED, message__isnull=True, created_at__lt=_cutoff(now))
    return sum(Notice.objects.filter(pk__in=ids).delete()[0] for ids in _batches(dropped, "created_at", batch=batch))


def finished_watches_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """Forget watches that owe nothing more, announced before the cutoff."""
    finished = Watch.objects.filter(due_at__isnull=True, announced_at__lt=_cutoff(now))
    return sum(Watch.objects.filter(pk__in=ids).delete()[0] for ids in _batches(finished, "announced_at", batch=batch))


def history_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """All three; returns how many rows of messages, notices and watches went."""
    return (
        messages_purge(now=now, batch=batch)
        + dropped_notices_purge(now=now, batch=batch)
        + finished_watches_purge(now=now, batch=batch)
    )
