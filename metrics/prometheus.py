"""`GET /metrics`: Prometheus text exposition format 0.0.4, written by hand.

Counters are totals since the tool's first row: ToolTotal (every rolled hour) plus the live
tail newer than the watermark, so a scrape reads one row per tool and about an hour of rows,
never the whole history. Gauges come from the held-queue index and the outbox's pending
index. Label values are tool and team names, so the endpoint is not public (see views).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Min
from django.utils import timezone

from envelopes.models import Step, Tool
from envelopes.states import HELD
from webhooks.models import OutboxMessage

from .aggregates import aggregate_live
from .counts import HourCounts
from .models import COUNTERS, ToolTotal
from .services import provisional_rows, watermark

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Family:
    name: str
    kind: str  # counter | gauge
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, labels: dict[str, str], value: float) -> None:
        self.samples.append((labels, value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    lines = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            rendered = ",".join(f'{key}="{_escape_label(val)}"' for key, val in labels.items())
            name = f"{family.name}{{{rendered}}}" if rendered else family.name
            lines.append(f"{name} {_number(value)}")
    return "\n".join(lines) + "\n"


# counter name -> (ToolTotal/HourCounts attribute, help)
TOOL_COUNTERS = {
    "holdpoint_envelopes_total": ("envelopes", "Envelopes received (errors and successes)."),
    "holdpoint_error_envelopes_total": ("errors", "Error envelopes received."),
    "holdpoint_undocumented_error_envelopes_total": (
        "undocumented_errors",
        "Error envelopes whose code was not in the catalog when they arrived.",
    ),
    "holdpoint_refusals_total": ("refusals", "Attempt-gate refusals."),
    "holdpoint_duplicate_writes_prevented_total": (
        "duplicate_writes_prevented",
        "Attempt-gate refusals that prevented a duplicate write.",
    ),
    "holdpoint_unknown_outcomes_total": ("unknown_outcomes", "Steps that entered verifying."),
    "holdpoint_resolved_by_verification_total": (
        "resolved_by_verification",
        "Steps that left verifying by a verification report.",
    ),
    "holdpoint_escalations_total": ("terminal_escalations", "Steps that entered escalated."),
    "holdpoint_attempt_budget_exhausted_total": (
        "attempt_budget_exhausted",
        "Steps escalated because their attempts ran out.",
    ),
    "holdpoint_redactions_total": ("redactions", "Envelopes with secrets redacted."),
    "holdpoint_suspicious_text_total": ("suspicious_text", "Envelopes flagged for instruction-like text."),
}
APPROVAL_COUNTERS = {
    "requested": "approvals_requested",
    "approved": "approvals_approved",
    "rejected": "approvals_rejected",
    "expired": "approvals_expired",
}


def _totals(tools: list[Tool], now: datetime) -> dict[int, dict[str, int]]:
    totals: dict[int, dict[str, int]] = {tool.pk: dict.fromkeys(COUNTERS, 0) for tool in tools}
    for row in ToolTotal.objects.filter(tool_id__in=list(totals)).values("tool_id", *COUNTERS):
        totals[row["tool_id"]] = {name: row[name] for name in COUNTERS}
    through, partial = watermark()
    tail: dict[int, HourCounts] = {}
    start = through or datetime.min.replace(tzinfo=now.tzinfo)
    if through is not None and partial is not None and partial <= now:
        rows = provisional_rows(list(totals), through, partial)
        if rows is not None:
            for row in rows:
                tail.setdefault(row.tool_id, HourCounts()).add(HourCounts.from_row(row))
            start = partial
    if start < now:
        # Rows not rolled yet. Without any roll this reads everything: run the beat task.
        for (tool_id, _), counts in aggregate_live(list(totals), start, now).items():
            tail.setdefault(tool_id, HourCounts()).add(counts)
    for tool_id, counts in tail.items():
        for name in COUNTERS:
            totals[tool_id][name] += getattr(counts, name)
    for values in totals.values():
        values["undocumented_errors"] = values["errors"] - values["documented_errors"]
    return totals


def families(now: datetime | None = None) -> list[Family]:
    now = now or timezone.now()
    tools = list(Tool.objects.select_related("team").order_by("team__slug", "name"))
    totals = _totals(tools, now)
    result = []
    for name, (attribute, help_text) in TOOL_COUNTERS.items():
        family = Family(name, "counter", help_text)
        for tool in tools:
            family.add({"team": tool.team.slug, "tool": tool.name}, totals[tool.pk][attribute])
        result.append(family)
    approvals = Family("holdpoint_approvals_total", "counter", "Approval requests and their outcomes.")
    for tool in tools:
        for outcome, attribute in APPROVAL_COUNTERS.items():
            approvals.add({"team": tool.team.slug, "tool": tool.name, "outcome": outcome}, totals[tool.pk][attribute])
    result.append(approvals)
    result.extend(_held_gauges(tools, now))
    result.extend(_outbox_gauges(now))
    return result


def _held_gauges(tools: list[Tool], now: datetime) -> list[Family]:
    held = Family("holdpoint_held_steps", "gauge", "Steps held now, by state.")
    oldest = Family(
        "holdpoint_oldest_held_step_age_seconds", "gauge", "Age of the oldest held step in its state."
    )
    rows = (
        Step.objects.filter(state__in=[state.value for state in HELD])
        .values("tool_id", "state")
        .annotate(n=Count("id"), first=Min("state_entered_at"))
        .order_by()
    )
    seen = {(row["tool_id"], row["state"]): row for row in rows}
    for tool in tools:
        for state in sorted(state.value for state in HELD):
            row = seen.get((tool.pk, state))
            labels = {"team": tool.team.slug, "tool": tool.name, "state": state}
            held.add(labels, row["n"] if row else 0)
            if row:
                oldest.add(labels, max(0.0, round((now - row["first"]).total_seconds(), 3)))
    return [held, oldest]


def _outbox_gauges(now: datetime) -> list[Family]:
    backlog = Family("holdpoint_outbox_pending_messages", "gauge", "Webhook messages waiting to be delivered.")
    age = Family(
        "holdpoint_outbox_oldest_pending_age_seconds", "gauge", "Age of the oldest undelivered webhook message."
    )
    rows = (
        OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING)
        .values("team__slug")
        .annotate(n=Count("id"), first=Min("created_at"))
        .order_by("team__slug")
    )
    for row in rows:
        labels = {"team": row["team__slug"]}
        backlog.add(labels, row["n"])
        age.add(labels, max(0.0, round((now - row["first"]).total_seconds(), 3)))
    return [backlog, age]
