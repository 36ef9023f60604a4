"""Reads: the metrics of a window, for one tool (API, tool page) or several (overview).

A window [since, until) is answered from the hourly rollups for its whole, rolled hours and
from the indexes for the rest: its ragged first and last hour and whatever is newer than the
watermark. The work is bounded by the hours in the window plus about two hours of rows,
however many envelopes the tables hold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q, Sum

from envelopes.models import ErrorCode, Step, Tool
from envelopes.rfc3339 import rfc3339
from envelopes.states import HELD
from policy.models import RuleTally

from .activity import attempts_per_step as _attempts_per_step
from .activity import ceil_day, ceil_hour, floor_day, floor_hour
from .aggregates import Key, aggregate_live
from .counts import HourCounts
from .models import ToolDay, ToolHour
from .services import provisional_rows, watermark

DEFAULT_WINDOW = timedelta(hours=24)
MAX_WINDOW = timedelta(days=90)
DOCUMENTED_SHARE_TARGET = 0.90


def window_hours(
    tool_ids: list[int], since: datetime, until: datetime, *, days: bool = True
) -> dict[Key, HourCounts]:
    """The counts of the window by (tool, period): whole rolled days (when `days`), whole
    rolled hours, and the live edges (keyed by their hour)."""
    result: dict[Key, HourCounts] = {}
    through, partial = watermark()
    first_full, last_full = ceil_hour(since), floor_hour(until)
    tail = since
    live = []
    if through is not None and first_full < min(last_full, through):
        last_full = min(last_full, through)
        hours = [(first_full, last_full)]
        first_day, last_day = ceil_day(first_full), floor_day(last_full)
        if days and first_day < last_day:
            for day_row in ToolDay.objects.filter(tool_id__in=tool_ids, day__gte=first_day, day__lt=last_day):
                result[(day_row.tool_id, day_row.day)] = HourCounts.from_row(day_row)
            hours = [(first_full, first_day), (last_day, last_full)]
        for start, end in hours:
            if start < end:
                for row in ToolHour.objects.filter(tool_id__in=tool_ids, hour__gte=start, hour__lt=end):
                    result[(row.tool_id, row.hour)] = HourCounts.from_row(row)
        live.append((since, first_full))
        tail = last_full
    if through is not None and partial is not None and tail == through and partial <= until:
        rows = provisional_rows(tool_ids, through, partial)
        if rows is not None:
            for row in rows:
                result[(row.tool_id, row.hour)] = HourCounts.from_row(row)
            tail = partial
    live.append((tail, until))
    for start, end in live:
        if start >= end:
            continue
        for key, counts in aggregate_live(tool_ids, start, end).items():
            result.setdefault(key, HourCounts()).add(counts)
    return result


def merged(counts: Iterable[HourCounts]) -> HourCounts:
    total = HourCounts()
    for each in counts:
        total.add(each)
    return total


def _p50_p95(values: list[float | None]) -> dict[str, float | None]:
    return {"p50": values[0], "p95": values[1]}


def _share(part: int, whole: int) -> float | None:
    return None if whole == 0 else part / whole


@dataclass(frozen=True)
class ShadowCounts:
    """What shadow rules would have done, and the evaluations that failed (contract §11)."""

    would_deny: int = 0
    would_hold: int = 0
    would_allow: int = 0
    errors: int = 0


SHADOW_BY_EFFECT = {"deny": "would_deny", "require_approval": "would_hold", "allow": "would_allow"}


def shadow_counts(tools: list[Tool], since: datetime, until: datetime) -> dict[int, ShadowCounts]:
    """Per tool, from the rules' daily tallies (policy.RuleTally): a window counts the whole UTC
    days it touches. One grouped read on the (team, tool, day) index; its rows are at most the
    rules naming the tools times the days, whatever the history holds."""
    if not tools or since >= until:
        return {}
    by_name = {(tool.team_id, tool.name): tool.pk for tool in tools}
    rows = (
        RuleTally.objects.filter(
            team_id__in={tool.team_id for tool in tools},
            tool__in={tool.name for tool in tools},
            day__gte=since.date(),
            day__lte=(until - timedelta(microseconds=1)).date(),
        )
        .values("team_id", "tool", "effect")
        .annotate(would=Sum("would_match"), failed=Sum("errors"))
        .order_by()
    )
    found: dict[int, dict[str, int]] = {}
    for row in rows:
        tool_id = by_name.get((row["team_id"], row["tool"]))
        if tool_id is None:
            continue
        entry = found.setdefault(tool_id, dict.fromkeys(("would_deny", "would_hold", "would_allow", "errors"), 0))
        entry[SHADOW_BY_EFFECT.get(row["effect"], "would_hold")] += row["would"] or 0
        entry["errors"] += row["failed"] or 0
    return {tool_id: ShadowCounts(**entry) for tool_id, entry in found.items()}


def approvals_by(counts: HourCounts) -> dict[str, int]:
    """Who approved (contract §11 `approvals.by`): reviewers, rules, grants (a held step approved
    by a grant, or a call the gate let through on one: each is an approval no human gave)."""
    return {
        "reviewer": counts.approvals_approved,
        "rule": counts.approved_by_rule,
        "grant": counts.approved_by_grant + counts.granted_by_grant,
    }


def metrics_representation(
    tool: Tool,
    since: datetime,
    until: datetime,
    counts: HourCounts,
    attempts: float | None,
    shadow: ShadowCounts | None = None,
) -> dict[str, Any]:
    """The metrics shape of contract §4 (`counts`: every hour of the window, merged)."""
    shadow = shadow or ShadowCounts()
    return {
        "tool": tool.name,
        "since": rfc3339(since),
        "until": rfc3339(until),
        "envelopes": {
            "total": counts.envelopes,
            "errors": counts.errors,
            "successes": counts.successes,
            "by_code": dict(sorted(counts.by_code.items())),
            "by_category": dict(sorted(counts.by_category.items())),
        },
        "documented_code_share": _share(counts.documented_errors, counts.errors),
        "unknown_outcomes": counts.unknown_outcomes,
        "resolved_by_verification": counts.resolved_by_verification,
        "duplicate_writes_prevented": counts.duplicate_writes_prevented,
        "pending_recovery_seconds": _p50_p95(counts.recovery_percentiles()),
        "terminal_escalations": counts.terminal_escalations,
        "approvals": {
            "requested": counts.approvals_requested,
            "approved": counts.approvals_approved,
            "rejected": counts.approvals_rejected,
            "expired": counts.approvals_expired,
            "latency_seconds": _p50_p95(counts.approval_latency_percentiles()),
            "by": approvals_by(counts),
        },
        "attempts_per_step": attempts,
        "attempt_budget_exhausted": counts.attempt_budget_exhausted,
        "redactions": counts.redactions,
        "suspicious_text": counts.suspicious_text,
        "policy": {
            "denied_by_rule": counts.denied_by_rule,
            "held_by_rule": counts.held_by_rule,
            "approved_by_rule": counts.approved_by_rule,
            "approved_by_grant": counts.approved_by_grant + counts.granted_by_grant,
            "shadow_would_deny": shadow.would_deny,
            "shadow_would_hold": shadow.would_hold,
            "shadow_would_allow": shadow.would_allow,
            "evaluation_errors": shadow.errors,
        },
    }


def tool_metrics(tool: Tool, since: datetime, until: datetime) -> dict[str, Any]:
    counts = merged(window_hours([tool.pk], since, until).values())
    shadow = shadow_counts([tool], since, until).get(tool.pk)
    return metrics_representation(tool, since, until, counts, _attempts_per_step(counts, since), shadow)


# --- series for the charts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """A window cut into equal bins, with the counts of each bin."""

    since: datetime
    until: datetime
    bin_size: timedelta
    bins: list[tuple[datetime, HourCounts]]
    total: HourCounts


def tool_series(tool: Tool, since: datetime, until: datetime, bin_size: timedelta) -> Series:
    """The window's counts per bin (bins start at `since`; bin_size a whole number of hours,
    or of days with `since` at midnight)."""
    whole_days = bin_size >= timedelta(days=1) and since == floor_day(since)
    hours = window_hours([tool.pk], since, until, days=whole_days)
    starts = []
    moment = since
    while moment < until:
        starts.append(moment)
        moment += bin_size
    bins = {start: HourCounts() for start in starts}
    for (_, hour), counts in hours.items():
        # A live edge's hour may start before `since`: it belongs to the first bin.
        index = max(0, int((hour - since) / bin_size)) if hour >= since else 0
        bins[starts[min(index, len(starts) - 1)]].add(counts)
    total = merged(bins.values())
    return Series(since=since, until=until, bin_size=bin_size, bins=list(bins.items()), total=total)


# --- the tool page's other panels --------------------------------------------------------------


@dataclass(frozen=True)
class UndocumentedCode:
    code: str
    count: int
    category: str  # the category agents sent most often with it
    next_action: str


def undocumented_codes(tool: Tool, counts: HourCounts) -> list[UndocumentedCode]:
    """Codes that arrived undocumented in the window and are still not in the catalog."""
    documented_now = set(
        ErrorCode.objects.filter(Q(tool=tool) | Q(tool__isnull=True), team_id=tool.team_id)
        .filter(code__in=list(counts.undocumented))
        .values_list("code", flat=True)
    )
    found = []
    for code, seen in counts.undocumented.items():
        if code in documented_now:
            continue
        category = Counter(seen["category"]).most_common(1)[0][0]
        next_action = Counter(seen["next_action"]).most_common(1)[0][0]
        found.append(UndocumentedCode(code=code, count=seen["n"], category=category, next_action=next_action))
    return sorted(found, key=lambda entry: (-entry.count, entry.code))


def catalog(tool: Tool) -> list[ErrorCode]:
    return list(
        ErrorCode.objects.filter(Q(tool=tool) | Q(tool__isnull=True), team_id=tool.team_id).order_by(
            "code", "tool_id"
        )
    )


@dataclass(frozen=True)
class HeldNow:
    count: int
    oldest_entered_at: datetime | None


def held_now(tools: list[Tool]) -> dict[int, HeldNow]:
    """Held steps per tool and the oldest one's entry time (the team, tool, state index)."""
    rows = (
        Step.objects.filter(
            team_id__in={tool.team_id for tool in tools},
            tool_id__in=[tool.pk for tool in tools],
            state__in=[state.value for state in HELD],
        )
        .values("tool_id")
        .annotate(n=Count("id"), oldest=Min("state_entered_at"))
        .order_by()
    )
    return {row["tool_id"]: HeldNow(row["n"], row["oldest"]) for row in rows}


# --- the overview ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolHeadline:
    tool: Tool
    counts: HourCounts
    held: HeldNow
    since: datetime

    @property
    def attempts_per_step(self) -> float | None:
        return _attempts_per_step(self.counts, self.since)

    @property
    def documented_code_share(self) -> float | None:
        return _share(self.counts.documented_errors, self.counts.errors)

    @property
    def below_target(self) -> bool:
        share = self.documented_code_share
        return share is not None and share < DOCUMENTED_SHARE_TARGET

    @property
    def recovery(self) -> dict[str, float | None]:
        return _p50_p95(self.counts.recovery_percentiles())

    @property
    def latency(self) -> dict[str, float | None]:
        return _p50_p95(self.counts.approval_latency_percentiles())

    @property
    def approvals_by(self) -> dict[str, int]:
        return approvals_by(self.counts)

    @property
    def approvals_saved(self) -> int:
        """Approvals rules and grants gave: the reviewer time saved."""
        by = approvals_by(self.counts)
        return by["rule"] + by["grant"]


def overview(tools: list[Tool], since: datetime, until: datetime) -> list[ToolHeadline]:
    """Headline figures of several tools: one rollup read and two live reads for all of them."""
    ids = [tool.pk for tool in tools]
    per_tool: dict[int, HourCounts] = {tool_id: HourCounts() for tool_id in ids}
    for (tool_id, _), counts in window_hours(ids, since, until).items():
        per_tool[tool_id].add(counts)
    held = held_now(tools)
    return [ToolHeadline(tool, per_tool[tool.pk], held.get(tool.pk, HeldNow(0, None)), since) for tool in tools]
