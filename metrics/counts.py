"""What one tool did in one hour (or any sum of hours), as an additive record: the counts of
two periods merge by addition, so hourly rollups and the live edge of a window add up into
any window. Its stored form is a `Rollup` row."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from . import histogram
from .models import COUNTERS, Rollup

R = TypeVar("R", bound=Rollup)


@dataclass
class HourCounts:
    """Additive: the counts of two hours (or two halves of one) merge by addition."""

    envelopes: int = 0
    errors: int = 0
    successes: int = 0
    documented_errors: int = 0
    redactions: int = 0
    suspicious_text: int = 0
    unknown_outcomes: int = 0
    resolved_by_verification: int = 0
    refusals: int = 0
    duplicate_writes_prevented: int = 0
    terminal_escalations: int = 0
    approvals_requested: int = 0
    approvals_approved: int = 0
    approvals_rejected: int = 0
    approvals_expired: int = 0
    attempt_budget_exhausted: int = 0
    denied_by_rule: int = 0
    held_by_rule: int = 0
    approved_by_rule: int = 0
    approved_by_grant: int = 0
    granted_by_grant: int = 0
    by_code: Counter = field(default_factory=Counter)
    by_category: Counter = field(default_factory=Counter)
    undocumented: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Held-time histograms: str(bucket) -> samples, as stored (see metrics.histogram).
    recovery: Counter = field(default_factory=Counter)
    approval_latency: Counter = field(default_factory=Counter)
    # Steps active in the hour (see metrics.activity): units, and retractions by the time of
    # the step's previous activity (str(µs since the epoch)) -> [steps, attempts].
    active_steps: int = 0
    active_step_attempts: int = 0
    step_retractions: dict[str, list[int]] = field(default_factory=dict)
    # How many periods were added up here; with exactly one stored row, its stored percentiles.
    parts: int = field(default=0, compare=False)
    stored_percentiles: dict[str, list[float | None]] | None = field(default=None, compare=False)

    def add(self, other: HourCounts) -> HourCounts:
        self.stored_percentiles = other.stored_percentiles if self.parts == 0 else None
        self.parts += other.parts or 1
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.by_code.update(other.by_code)
        self.by_category.update(other.by_category)
        for code, seen in other.undocumented.items():
            self._add_undocumented(code, seen["n"], seen["category"], seen["next_action"])
        self.recovery.update(other.recovery)
        self.approval_latency.update(other.approval_latency)
        self.active_steps += other.active_steps
        self.active_step_attempts += other.active_step_attempts
        for previous, (steps, attempts) in other.step_retractions.items():
            entry = self.step_retractions.setdefault(previous, [0, 0])
            entry[0] += steps
            entry[1] += attempts
        return self

    def _add_undocumented(
        self, code: str, n: int, categories: dict[str, int], next_actions: dict[str, int]
    ) -> None:
        entry = self.undocumented.setdefault(code, {"n": 0, "category": Counter(), "next_action": Counter()})
        entry["n"] += n
        entry["category"].update(categories)
        entry["next_action"].update(next_actions)

    def recovery_percentiles(self) -> list[float | None]:
        """[p50, p95] of the time held (metrics.histogram)."""
        if self.stored_percentiles is not None:
            return self.stored_percentiles["recovery"]
        return histogram.percentiles(self.recovery, 50, 95)

    def approval_latency_percentiles(self) -> list[float | None]:
        if self.stored_percentiles is not None:
            return self.stored_percentiles["approval_latency"]
        return histogram.percentiles(self.approval_latency, 50, 95)

    @property
    def is_empty(self) -> bool:
        return not any(getattr(self, name) for name in COUNTERS) and not self.recovery and not self.active_steps

    # --- the stored form --------------------------------------------------------------------

    def to_row(self, model: type[R], *, team_id: int, tool_id: int, **period: datetime) -> R:
        recovery = histogram.percentiles(self.recovery, 50, 95)
        latency = histogram.percentiles(self.approval_latency, 50, 95)
        return model(
            recovery_p50=recovery[0],
            recovery_p95=recovery[1],
            approval_latency_p50=latency[0],
            approval_latency_p95=latency[1],
            team_id=team_id,
            tool_id=tool_id,
            **period,
            **{name: getattr(self, name) for name in COUNTERS},
            by_code=dict(self.by_code),
            by_category=dict(self.by_category),
            undocumented={
                code: {"n": seen["n"], "category": dict(seen["category"]), "next_action": dict(seen["next_action"])}
                for code, seen in self.undocumented.items()
            },
            recovery_histogram={bucket: n for bucket, n in self.recovery.items() if n},
            approval_latency_histogram={bucket: n for bucket, n in self.approval_latency.items() if n},
            active_steps=self.active_steps,
            active_step_attempts=self.active_step_attempts,
            step_retractions=self.step_retractions,
        )

    @classmethod
    def from_row(cls, row: Rollup) -> HourCounts:
        stored: dict[str, list[float | None]] | None = {
            "recovery": [row.recovery_p50, row.recovery_p95],
            "approval_latency": [row.approval_latency_p50, row.approval_latency_p95],
        }
        # A row with samples but no stored percentiles predates them: compute instead.
        if (row.recovery_p50 is None) != (not row.recovery_histogram) or (row.approval_latency_p50 is None) != (
            not row.approval_latency_histogram
        ):
            stored = None
        counts = cls(
            parts=1,
            stored_percentiles=stored,
            **{name: getattr(row, name) for name in COUNTERS},
            by_code=Counter(row.by_code),
            by_category=Counter(row.by_category),
            recovery=Counter(row.recovery_histogram),
            approval_latency=Counter(row.approval_latency_histogram),
            active_steps=row.active_steps,
            active_step_attempts=row.active_step_attempts,
            step_retractions=row.step_retractions,
        )
        for code, seen in row.undocumented.items():
            counts._add_undocumented(code, seen["n"], seen["category"], seen["next_action"])
        return counts
