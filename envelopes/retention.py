"""How long quarantined payloads are kept (issue 10, point 8).

A payload that broke the contract is kept, redacted, for the team to see (contract §2), but not
for ever: an agent that keeps sending a broken body writes a row per call. Beat purges rows
received more than HOLDPOINT_QUARANTINE_RETENTION_DAYS ago (default 30; read at each call),
hourly, in batches. The step it escalated keeps its state and audit chain; only the payload
goes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from .models import Quarantine

PURGE_BATCH = 1000


def quarantine_purge(*, now: datetime | None = None, batch: int = PURGE_BATCH) -> int:
    """Forget quarantined payloads older than the retention, a batch per statement; returns
    how many."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.HOLDPOINT_QUARANTINE_RETENTION_DAYS)
    purged = 0
    while True:
        ids = list(
            Quarantine.objects.filter(received_at__lt=cutoff)
            .order_by("received_at")
            .values_list("pk", flat=True)[:batch]
        )
        if ids:
            purged += Quarantine.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < batch:
            return purged
