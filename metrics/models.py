"""Hourly rollups of the metrics of contract §6, so that a window never scans every envelope.

A `ToolHour` row holds everything one tool did in one closed hour: envelope counts by code,
category and flag, the audit-log counters, the held-time samples as sparse histograms, and the
steps active in it. A `ToolDay` row is the sum of a day's hours. Rows are recomputed whole
(never incremented), so rolling an hour twice changes nothing. `MetricsWatermark` says up to
where hours are rolled; later rows are read live.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

# The counters of a ToolHour that add up across hours (and into ToolTotal).
COUNTERS = (
    "envelopes",
    "errors",
    "successes",
    "documented_errors",
    "redactions",
    "suspicious_text",
    "unknown_outcomes",
    "resolved_by_verification",
    "refusals",
    "duplicate_writes_prevented",
    "terminal_escalations",
    "approvals_requested",
    "approvals_approved",
    "approvals_rejected",
    "approvals_expired",
    "attempt_budget_exhausted",
    # What rules and grants did (contract §11), from the policy app's acts (policy.RuleAct).
    "denied_by_rule",
    "held_by_rule",
    "approved_by_rule",
    "approved_by_grant",
    "granted_by_grant",
)


def _counter() -> models.PositiveIntegerField:
    return models.PositiveIntegerField(default=0)


class Rollup(models.Model):
    """Everything one tool did in one period; periods add up by addition (see aggregates)."""

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")
    tool = models.ForeignKey("envelopes.Tool", on_delete=models.CASCADE, related_name="+")

    envelopes = _counter()
    errors = _counter()
    successes = _counter()
    documented_errors = _counter()  # documented when the envelope arrived
    redactions = _counter()
    suspicious_text = _counter()
    unknown_outcomes = _counter()
    resolved_by_verification = _counter()
    refusals = _counter()
    duplicate_writes_prevented = _counter()
    terminal_escalations = _counter()
    approvals_requested = _counter()
    approvals_approved = _counter()
    approvals_rejected = _counter()
    approvals_expired = _counter()
    attempt_budget_exhausted = _counter()
    denied_by_rule = _counter()
    held_by_rule = _counter()
    approved_by_rule = _counter()
    approved_by_grant = _counter()  # a held step approved by a grant
    granted_by_grant = _counter()  # a call the gate let through on a grant

    by_code = models.JSONField(default=dict)  # error envelopes: {CODE: n}
    by_category = models.JSONField(default=dict)  # error envelopes: {category: n}
    # Undocumented codes: {CODE: {"n": n, "category": {c: n}, "next_action": {a: n}}}
    undocumented = models.JSONField(default=dict)
    # Held-time histograms, {bucket: n} (see metrics.histogram for the buckets).
    recovery_histogram = models.JSONField(default=dict)
    approval_latency_histogram = models.JSONField(default=dict)
    # Their p50/p95, so that a chart whose bins are whole rows sorts no histogram.
    recovery_p50 = models.FloatField(null=True, blank=True)
    recovery_p95 = models.FloatField(null=True, blank=True)
    approval_latency_p50 = models.FloatField(null=True, blank=True)
    approval_latency_p95 = models.FloatField(null=True, blank=True)
    # Steps active in the period, for attempts_per_step (see metrics.activity).
    active_steps = models.PositiveIntegerField(default=0)
    active_step_attempts = models.PositiveBigIntegerField(default=0)
    step_retractions = models.JSONField(default=dict)  # {previous activity µs: [steps, attempts]}

    computed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class ToolHour(Rollup):
    hour = models.DateTimeField()  # the hour's start, UTC
    # Set on the current hour's provisional row: it counts [hour, partial_through) only.
    partial_through = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Also the index of every window read: one tool (or a few), a range of hours.
            models.UniqueConstraint(fields=["tool", "hour"], name="toolhour_unique_tool_hour"),
        ]


class ToolDay(Rollup):
    """The sum of a tool's 24 ToolHour rows of one UTC day, written once the day is rolled, so
    that a long window reads one row per day instead of 24."""

    day = models.DateTimeField()  # the day's start, 00:00 UTC

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tool", "day"], name="toolday_unique_tool_day"),
        ]


class ToolTotal(models.Model):
    """A tool's counters summed over every rolled hour: the Prometheus counters read this row
    plus the live tail, instead of summing every ToolHour on each scrape."""

    tool = models.OneToOneField("envelopes.Tool", on_delete=models.CASCADE, related_name="metric_total")
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="+")

    envelopes = _counter()
    errors = _counter()
    successes = _counter()
    documented_errors = _counter()
    redactions = _counter()
    suspicious_text = _counter()
    unknown_outcomes = _counter()
    resolved_by_verification = _counter()
    refusals = _counter()
    duplicate_writes_prevented = _counter()
    terminal_escalations = _counter()
    approvals_requested = _counter()
    approvals_approved = _counter()
    approvals_rejected = _counter()
    approvals_expired = _counter()
    attempt_budget_exhausted = _counter()
    denied_by_rule = _counter()
    held_by_rule = _counter()
    approved_by_rule = _counter()
    approved_by_grant = _counter()
    granted_by_grant = _counter()

    updated_at = models.DateTimeField(default=timezone.now)


class MetricsWatermark(models.Model):
    """One row: every hour before `rolled_through` is in ToolHour, and the next one up to
    `partial_through`; later rows are read live."""

    rolled_through = models.DateTimeField(null=True, blank=True)
    # The hour starting at rolled_through is in ToolHour up to here (provisional rows).
    partial_through = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    SINGLETON = 1
