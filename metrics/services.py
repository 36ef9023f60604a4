"""The metrics app's only writes: rolling closed hours up into ToolHour and ToolTotal.

An hour is rolled once it closed `SETTLE` ago, so that a transaction that stamped a row just
before the hour's end has committed; until then, every run recomputes the current hour so far
(up to `PARTIAL_SETTLE` ago) into provisional rows. Every roll recomputes whole hours and replaces their
rows: running it twice, or two workers at once (they queue on the watermark row), changes
nothing. A row stamped into an hour that is already rolled (a backfill, a restore, a test
with an explicit `now=`) is only counted once that hour is rolled again:
`metrics_rollup(rebuild_from=...)`, or `python manage.py rollup_metrics --rebuild-from`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from envelopes.models import AuditEvent, Envelope, Tool

from .activity import DAY, HOUR, floor_day, floor_hour
from .aggregates import aggregate_live
from .counts import HourCounts
from .models import COUNTERS, MetricsWatermark, ToolDay, ToolHour, ToolTotal

SETTLE = timedelta(minutes=5)
# The current hour is rolled up to this long ago, on every run (beat: every minute).
PARTIAL_SETTLE = timedelta(minutes=1)


def watermark() -> tuple[datetime | None, datetime | None]:
    """(rolled_through, partial_through): every hour before rolled_through is in ToolHour (None:
    nothing is rolled yet), and the hour starting there is, up to partial_through when set."""
    row = MetricsWatermark.objects.filter(pk=MetricsWatermark.SINGLETON).values_list(
        "rolled_through", "partial_through"
    ).first()
    return row if row is not None else (None, None)


def provisional_rows(tool_ids: list[int], through: datetime, partial: datetime) -> list[ToolHour] | None:
    """The current hour's provisional rows, which cover [through, partial) as watermark() read
    them; None when a roll replaced them since (then the hour is read live)."""
    rows = list(ToolHour.objects.filter(tool_id__in=tool_ids, hour=through))
    return rows if all(row.partial_through == partial for row in rows) else None


def _earliest_activity(tools: list[Tool]) -> datetime | None:
    """The first envelope or audit row of any tool, found on the per-tool indexes."""
    firsts = []
    for tool in tools:
        firsts.append(
            Envelope.objects.filter(tool=tool).order_by("received_at").values_list("received_at", flat=True).first()
        )
        for kind in (AuditEvent.Kind.TRANSITION, AuditEvent.Kind.REFUSAL):
            firsts.append(
                AuditEvent.objects.filter(tool=tool, kind=kind)
                .order_by("created_at")
                .values_list("created_at", flat=True)
                .first()
            )
    found = [first for first in firsts if first is not None]
    return min(found) if found else None


def _roll_range(tools: list[Tool], start: datetime, end: datetime) -> set[int]:
    """Recompute the hours [start, end) of every tool, and the days that ended in (start, end];
    returns the tools whose rows changed."""
    touched: set[int] = set()
    for tool in tools:
        counts = aggregate_live([tool.pk], start, end)
        deleted, _ = ToolHour.objects.filter(tool=tool, hour__gte=start, hour__lt=end).delete()
        rows = [
            hour_counts.to_row(ToolHour, team_id=tool.team_id, tool_id=tool.pk, hour=hour)
            for (_, hour), hour_counts in sorted(counts.items())
            if not hour_counts.is_empty
        ]
        ToolHour.objects.bulk_create(rows, batch_size=500)
        if deleted or rows:
            touched.add(tool.pk)
            _roll_days(tool, start, end)
    return touched


def _roll_partial_hour(tools: list[Tool], hour: datetime, now: datetime) -> datetime | None:
    """Compute the hour that has not closed yet, up to PARTIAL_SETTLE ago, into ToolHour rows
    (replaced on every run, and by the final roll once the hour closed), so that a window
    ending now reads minutes of rows live, not an hour. Returns how far the rows reach."""
    through = min(now - PARTIAL_SETTLE, hour + HOUR)
    if through <= hour:
        return None
    ToolHour.objects.filter(hour=hour).delete()
    counts = aggregate_live([tool.pk for tool in tools], hour, through)
    team_of = {tool.pk: tool.team_id for tool in tools}
    ToolHour.objects.bulk_create(
        [
            hour_counts.to_row(ToolHour, team_id=team_of[tool_id], tool_id=tool_id, hour=hour, partial_through=through)
            for (tool_id, _), hour_counts in counts.items()
            if not hour_counts.is_empty
        ],
        batch_size=500,
    )
    return through


def _roll_days(tool: Tool, start: datetime, end: datetime) -> None:
    midnight = floor_day(start) + DAY
    while midnight <= end:
        day = midnight - DAY
        total = HourCounts()
        for row in ToolHour.objects.filter(tool=tool, hour__gte=day, hour__lt=midnight):
            total.add(HourCounts.from_row(row))
        ToolDay.objects.filter(tool=tool, day=day).delete()
        if not total.is_empty:
            total.to_row(ToolDay, team_id=tool.team_id, tool_id=tool.pk, day=day).save(force_insert=True)
        midnight += DAY


def _refresh_totals(tool_ids: set[int], through: datetime, now: datetime) -> None:
    """Each tool's counters over its final hours (the current hour's partial row is not one)."""
    tools = {tool.pk: tool for tool in Tool.objects.filter(pk__in=tool_ids)}
    sums = {
        row["tool_id"]: row
        for row in ToolHour.objects.filter(tool_id__in=tool_ids, hour__lt=through)
        .values("tool_id")
        .annotate(**{name: Sum(name) for name in COUNTERS})
        .order_by()
    }
    for tool_id, tool in tools.items():
        row: Mapping[str, Any] = sums.get(tool_id, {})
        ToolTotal.objects.update_or_create(
            tool=tool,
            defaults={
                "team_id": tool.team_id,
                "updated_at": now,
                **{name: row.get(name) or 0 for name in COUNTERS},
            },
        )


def metrics_rollup(*, now: datetime | None = None, rebuild_from: datetime | None = None) -> int:
    """Roll every closed hour not rolled yet (and, with `rebuild_from`, every hour from then on
    again). Returns the number of hours rolled.

    Each chunk of hours is one transaction under the watermark's row lock, so a second worker
    waits, then finds the hours done.
    """
    now = now or timezone.now()
    target = floor_hour(now - SETTLE)
    MetricsWatermark.objects.get_or_create(pk=MetricsWatermark.SINGLETON)
    rebuild_next = floor_hour(rebuild_from) if rebuild_from else None
    rolled = 0
    while True:
        with transaction.atomic():
            watermark = MetricsWatermark.objects.select_for_update().get(pk=MetricsWatermark.SINGLETON)
            tools = list(Tool.objects.order_by("pk"))
            start = watermark.rolled_through
            if start is None:
                earliest = _earliest_activity(tools)
                start = floor_hour(earliest) if earliest else target
            if rebuild_next is not None:
                start = min(start, rebuild_next)
            if start >= target:
                # Every closed hour is rolled (when nothing happened before target, the first
                # hours to roll start there); now the current hour, so far.
                watermark.rolled_through = watermark.rolled_through or target
                watermark.partial_through = _roll_partial_hour(tools, watermark.rolled_through, now)
                watermark.updated_at = now
                watermark.save()
                return rolled
            end = min(floor_day(start) + DAY, target)  # a day at most per transaction
            watermark.rolled_through = max(watermark.rolled_through or end, end)
            _refresh_totals(_roll_range(tools, start, end), watermark.rolled_through, now)
            watermark.partial_through = None
            watermark.updated_at = now
            watermark.save()
        rolled += int((end - start) / HOUR)
        if rebuild_next is not None:
            rebuild_next = end
