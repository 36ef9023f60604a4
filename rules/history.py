"""The test against history (contract §11): a draft rule set evaluated over the team's recent
proposals, beside the current set, before anyone saves it.

The proposals are the attempts the gate granted in the last 30 days for the tools the draft
names (every tool when a rule names "*"), the latest 10,000 at most; each is evaluated as the
gate would have seen it (`policy.evaluation`), with no grants (a grant is a reviewer's, not the
set's). The work is bounded by the cap, never by the table: the steps are read newest first
through step_team_created_idx and stop at the cap, then their attempts through
attempt_unique_number_per_step.

What history cannot say is filled in plainly: `key` is "" (an attempt does not record the API
key that asked), `code` is the step's last envelope code as it is now, `state` is the state a
grant is given in (`in_progress`), `now` is when the attempt was granted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from accounts.models import Team
from envelopes.models import Attempt, Step

from . import verdicts

WINDOW = timedelta(days=30)
ATTEMPTS_CAP = 10_000
EXAMPLES = 20
OUTCOMES = verdicts.OUTCOMES


@dataclass
class SetReport:
    outcomes: Counter[str] = field(default_factory=Counter)
    shadow: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    by_rule: dict[str, Counter[str]] = field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, verdict: verdicts.Outcome, example: dict[str, Any]) -> None:
        self.outcomes[verdict.outcome] += 1
        for kind in verdict.shadow:
            self.shadow[kind] += 1
        self.errors += len(verdict.errors)
        for name, what in verdict.per_rule:
            self.by_rule.setdefault(name, Counter())[what] += 1
        shown = self.examples.setdefault(verdict.outcome, [])
        if len(shown) < EXAMPLES:
            shown.append({**example, "rule": verdict.rule})

    def as_json(self) -> dict[str, Any]:
        return {
            "outcomes": {name: self.outcomes.get(name, 0) for name in OUTCOMES},
            "shadow": {name: self.shadow.get(name, 0) for name in verdicts.SHADOW},
            "errors": self.errors,
            "by_rule": {name: dict(counts) for name, counts in self.by_rule.items()},
            "examples": self.examples,
        }


@dataclass
class HistoryReport:
    since: datetime
    until: datetime
    tools: list[str] | None  # None: every tool
    attempts: int = 0
    cap: int = ATTEMPTS_CAP
    capped: bool = False
    draft: SetReport = field(default_factory=SetReport)
    current: SetReport = field(default_factory=SetReport)
    changes: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    change_counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {
            "since": _time(self.since),
            "until": _time(self.until),
            "tools": self.tools if self.tools is not None else ["*"],
            "attempts": self.attempts,
            "attempts_cap": self.cap,
            "capped": self.capped,
            "draft": self.draft.as_json(),
            "current": self.current.as_json(),
            "changes": [
                {
                    "from": before,
                    "to": after,
                    "count": self.change_counts[(before, after)],
                    "examples": self.changes[(before, after)],
                }
                for before, after in sorted(self.change_counts, key=lambda pair: -self.change_counts[pair])
            ],
        }


def _time(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _tools_named(rules: Sequence[dict[str, Any]]) -> list[str] | None:
    names: set[str] = set()
    for rule in rules:
        tools = rule.get("tools") or []
        if "*" in tools:
            return None
        names.update(str(tool) for tool in tools)
    return sorted(names)


def proposals(team: Team, tools: list[str] | None, *, since: datetime, cap: int | None = None) -> list[Attempt]:
    """The latest `cap` (ATTEMPTS_CAP) attempts granted since `since` for `tools` (None: all), newest first."""
    cap = ATTEMPTS_CAP if cap is None else cap
    steps = Step.objects.for_team(team).filter(created_at__gte=since)
    if tools is not None:
        steps = steps.filter(tool__name__in=tools)
    step_ids = list(steps.order_by("-created_at", "-id").values_list("id", flat=True)[:cap])
    if not step_ids:
        return []
    return list(
        Attempt.objects.filter(step_id__in=step_ids, granted_at__gte=since)
        .select_related("step__tool", "step__last_envelope")
        .only(
            "id",
            "number",
            "run_id",
            "granted_at",
            "input",
            "fingerprint",
            "step__id",
            "step__operation_ref",
            "step__tool__name",
            "step__last_envelope__code",
        )
        .order_by("-granted_at", "-id")[:cap]
    )


def history_test(
    *, team: Team, draft: Sequence[dict[str, Any]], current: Sequence[dict[str, Any]], now: datetime | None = None
) -> HistoryReport:
    """Evaluate `draft` and `current` (rules as dicts, already valid) over the proposals."""
    now = now or timezone.now()
    since = now - WINDOW
    tools = _tools_named(draft)
    report = HistoryReport(since=since, until=now, tools=tools, cap=ATTEMPTS_CAP)
    found = proposals(team, tools, since=since, cap=report.cap)
    report.attempts = len(found)
    report.capped = len(found) >= report.cap
    draft_set, current_set = verdicts.compiled(draft), verdicts.compiled(current)
    for attempt in found:
        step = attempt.step
        facts = verdicts.facts_of(
            tool=step.tool.name,
            input=attempt.input,
            run_id=attempt.run_id,
            attempt=attempt.number,
            code=(step.last_envelope.code if step.last_envelope else "") or "",
            now=attempt.granted_at,
        )
        example = {
            "step_id": step.pk,
            "operation_ref": step.operation_ref,
            "tool": step.tool.name,
            "attempt": attempt.number,
            "granted_at": _time(attempt.granted_at),
        }
        new, old = verdicts.outcome(draft_set, facts), verdicts.outcome(current_set, facts)
        report.draft.add(new, example)
        report.current.add(old, example)
        if new.outcome != old.outcome:
            pair = (old.outcome, new.outcome)
            report.change_counts[pair] += 1
            shown = report.changes.setdefault(pair, [])
            if len(shown) < EXAMPLES:
                shown.append({**example, "rule": new.rule or old.rule})
    return report
