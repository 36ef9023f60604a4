"""How long the webhook history is kept (issue 10, point 8).

Every event writes a message per endpoint and every try a row: without a purge both tables
grow for ever. Beat purges, hourly and in batches (no transaction holds many rows):
- delivered messages HOLDPOINT_WEBHOOK_RETENTION_DAYS after delivery (default 30), with
  their tries (the step page's timeline loses them then);
- dead letters HOLDPOINT_DEAD_LETTER_RETENTION_DAYS after they were written (default 90):
  they are shown to the team to act on (redeliver), so they stay three times longer, but not
  for ever (an endpoint that never answers makes one a message);
- pending messages never: they are still being delivered (ten tries end within ~3.5 days).
A try is never purged alone: it goes with its message. Both settings are read at each call.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from .models import OutboxMessage

PURGE_BATCH = 1000


def _purge(messages: QuerySet[OutboxMessage], order: str, *, batch: int) -> int:
    """Delete these messages (and their tries), a batch per statement; returns how many."""
    purged = 0
    while True:
        ids = list(messages.order_by(order).values_list("pk", flat=True)[:batch])
        if ids:
            # Counted as messages: the tries go with them by CASCADE.
            purged += OutboxMessage.objects.filter(pk__in=ids).delete()[1].get(OutboxMessage._meta.label, 0)
        if len(ids) < batch:
            return purged


def delivered_messages_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """Forget messages delivered more than HOLDPOINT_WEBHOOK_RETENTION_DAYS ago."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.HOLDPOINT_WEBHOOK_RETENTION_DAYS)
    delivered = OutboxMessage.objects.filter(status=OutboxMessage.Status.DELIVERED, delivered_at__lt=cutoff)
    return _purge(delivered, "delivered_at", batch=batch)


def dead_letters_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """Forget dead letters written more than HOLDPOINT_DEAD_LETTER_RETENTION_DAYS ago."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.HOLDPOINT_DEAD_LETTER_RETENTION_DAYS)
    dead = OutboxMessage.objects.filter(status=OutboxMessage.Status.DEAD, created_at__lt=cutoff)
    return _purge(dead, "created_at", batch=batch)
