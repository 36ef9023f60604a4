"""Deleting a table's old rows without an index on their age.

Rows whose ids grow as they are written (an append-only stream, a keyed call's answer) are
purged by walking the primary key, oldest first, a batch at a time, and stopping after the
first batch that holds a row newer than the cutoff: no index on the time column, which every
write would pay one more index entry for. An old row behind a newer one waits for a later purge.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet


def purge_in_id_order(rows: QuerySet[Any], *, written: str, cutoff: datetime, batch: int) -> int:
    """Delete `rows` whose `written` is before `cutoff`, a batch per statement, in id order;
    returns how many. Each batch reads at most `batch` rows beyond what it deletes."""
    ordered = rows.order_by("pk")
    purged, after = 0, 0
    while True:
        page = list(ordered.filter(pk__gt=after).values_list("pk", written)[:batch])
        old = [pk for pk, at in page if at < cutoff]
        if old:
            purged += rows.model._default_manager.filter(pk__in=old).delete()[0]
        if len(old) < len(page) or len(page) < batch:
            return purged
        after = page[-1][0]
