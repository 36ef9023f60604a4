"""The tool page's windows and charts, built from the counts of each bin."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .charts import OTHER, PALETTE, BarSeries, Chart, LineSeries, bar_chart, format_duration, format_share, line_chart
from .queries import DOCUMENTED_SHARE_TARGET, Series

TOP_CODES = 6


@dataclass(frozen=True)
class PageWindow:
    key: str
    label: str
    length: timedelta
    bin_size: timedelta

    def bounds(self, now: datetime) -> tuple[datetime, datetime]:
        """Bins aligned on UTC bin boundaries; the last one is the bin that holds `now`."""
        now = now.astimezone(UTC)
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        current = epoch + ((now - epoch) // self.bin_size) * self.bin_size
        return current + self.bin_size - self.length, now


WINDOWS = {
    "24h": PageWindow("24h", "24 hours", timedelta(hours=24), timedelta(hours=1)),
    "7d": PageWindow("7d", "7 days", timedelta(days=7), timedelta(hours=6)),
    "30d": PageWindow("30d", "30 days", timedelta(days=30), timedelta(days=1)),
}
DEFAULT_WINDOW_KEY = "24h"


def _per(bin_size: timedelta) -> str:
    if bin_size == timedelta(hours=1):
        return "per hour"
    if bin_size == timedelta(days=1):
        return "per day"
    return f"per {int(bin_size.total_seconds() // 3600)} hours"


def tool_charts(series: Series) -> list[Chart]:
    starts = [start for start, _ in series.bins]
    bins = [counts for _, counts in series.bins]
    size = series.bin_size
    per = _per(size)
    total = series.total
    return [
        _envelopes_by_code(starts, bins, size, per, total.by_code, total.successes),
        line_chart(
            key="documented-share",
            title="Documented code share",
            caption=f"Error envelopes whose code was in the catalog when they arrived, {per}. "
            f"Below the {DOCUMENTED_SHARE_TARGET:.2f} line, agents meet codes nobody documented.",
            starts=starts,
            bin_size=size,
            series=[
                LineSeries(
                    "documented share",
                    [c.documented_errors / c.errors if c.errors else None for c in bins],
                    PALETTE[0],
                    total=format_share(total.documented_errors / total.errors if total.errors else None),
                )
            ],
            kind="share",
            reference=DOCUMENTED_SHARE_TARGET,
            reference_label=f"{DOCUMENTED_SHARE_TARGET:.2f} target",
        ),
        _percentile_chart(
            "pending-recovery",
            "Pending recovery",
            f"Time a step was held before it left the held state (p50 and p95), {per}.",
            starts, size, [c.recovery_percentiles() for c in bins], total.recovery_percentiles(),
        ),
        bar_chart(
            key="escalations",
            title="Escalations and duplicate writes prevented",
            caption=f"Steps that entered escalated, and attempt-gate refusals that prevented a second write, {per}.",
            starts=starts,
            bin_size=size,
            series=[
                BarSeries("escalations", [c.terminal_escalations for c in bins], PALETTE[3]),
                BarSeries("duplicate writes prevented", [c.duplicate_writes_prevented for c in bins], PALETTE[2]),
            ],
            stacked=False,
        ),
        bar_chart(
            key="approvals",
            title="Approvals",
            caption=f"Approval requests and how they ended, {per}.",
            starts=starts,
            bin_size=size,
            series=[
                BarSeries("requested", [c.approvals_requested for c in bins], PALETTE[0]),
                BarSeries("approved", [c.approvals_approved for c in bins], PALETTE[2]),
                BarSeries("rejected", [c.approvals_rejected for c in bins], PALETTE[3]),
                BarSeries("expired", [c.approvals_expired for c in bins], OTHER),
            ],
            stacked=False,
        ),
        _percentile_chart(
            "approval-latency",
            "Approval latency",
            f"Time from the approval request to the approve or reject decision (p50 and p95), {per}.",
            starts, size, [c.approval_latency_percentiles() for c in bins], total.approval_latency_percentiles(),
        ),
    ]


def _envelopes_by_code(
    starts: list[datetime], bins: list, size: timedelta, per: str, by_code: Counter, successes: int
) -> Chart:
    ranked = [code for code, _ in by_code.most_common()]
    shown, rest = ranked[:TOP_CODES], ranked[TOP_CODES:]
    series = [
        BarSeries(code, [c.by_code.get(code, 0) for c in bins], PALETTE[index % len(PALETTE)])
        for index, code in enumerate(shown)
    ]
    if rest:
        series.append(
            BarSeries(f"{len(rest)} other codes", [sum(c.by_code.get(code, 0) for code in rest) for c in bins], OTHER)
        )
    return bar_chart(
        key="envelopes-by-code",
        title="Error envelopes by code",
        caption=f"Error envelopes {per}, stacked by code; bar labels are totals. "
        f"Successes in the window: {successes:,}.",
        starts=starts,
        bin_size=size,
        series=series,
        stacked=True,
    )


def _percentile_chart(
    key: str,
    title: str,
    caption: str,
    starts: list[datetime],
    size: timedelta,
    per_bin: list[list[float | None]],
    total: list[float | None],
) -> Chart:
    return line_chart(
        key=key,
        title=title,
        caption=caption,
        starts=starts,
        bin_size=size,
        series=[
            LineSeries("p50", [p[0] for p in per_bin], PALETTE[0], total=format_duration(total[0])),
            LineSeries("p95", [p[1] for p in per_bin], PALETTE[3], dashed=True, total=format_duration(total[1])),
        ],
        kind="duration",
    )
