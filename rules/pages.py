"""What the pages show, computed once per request: each rule's figures per day and the steps it
acted on, the test's report in words, the grants' rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils.safestring import SafeString

from accounts.models import Team
from metrics.charts import PALETTE, BarSeries, bar_chart, render_chart
from policy.models import Grant, Rule
from policy.words import when_in_words

from . import tallies
from .history import ATTEMPTS_CAP, HistoryReport
from .ruleset import rule_editable, set_to_yaml
from .services import grant_live
from .validation import problem_line

DAYS = 30
STEPS_SHOWN = 50
OUTCOME_LABELS = {
    "denied": "denied (deny)",
    "held": "held for approval",
    "allowed": "approved by an allow rule",
    "granted": "granted, no rule acted",
}
NEW_RULE = """\
name: new-rule
description: ""
tools: ["*"]
when: 'has(input.amount_cents) && input.amount_cents > 50000'
effect: require_approval
approvals: 1
approvers: null
mode: shadow
enabled: true
"""


def _words(expression: str) -> str:
    try:
        return when_in_words(expression)
    except Exception:  # words are a help: an expression they cannot read is shown as written
        return ""


@dataclass
class RulePanel:
    rule: Rule
    words: str
    totals: dict[str, int]
    chart: SafeString
    steps: list[dict[str, Any]]


def _days(now: datetime) -> list[datetime]:
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return [today - timedelta(days=DAYS - 1 - index) for index in range(DAYS)]


def rule_panels(team: Team, rules: Sequence[Rule], *, now: datetime) -> list[RulePanel]:
    """Each rule with its matches, would-be matches and errors per day over 30 days (one query
    for all rules) and the latest steps it acted on (one query per rule, 50 rows each)."""
    days = _days(now)
    per_day = tallies.per_day(team, rules, since=days[0])
    panels = []
    for rule in rules:
        counts = per_day.get(rule.pk, {})
        series = []
        for number, (kind, label) in enumerate(tallies.KINDS):
            values = [counts.get((day.date(), kind), 0) for day in days]
            series.append(BarSeries(label=label, values=values, color=PALETTE[number]))
        chart = bar_chart(
            key=f"rule-{rule.name}",
            title=f"{rule.name}: per day",
            caption="Matches (enforced), would-be matches (shadow) and evaluation errors, per UTC day",
            starts=days,
            bin_size=timedelta(days=1),
            series=series,
            stacked=False,
        )
        totals = {kind: sum(s.values) for (kind, _), s in zip(tallies.KINDS, series, strict=True)}
        panels.append(
            RulePanel(
                rule=rule,
                words=_words(rule.when),
                totals=totals,
                chart=render_chart(chart),
                steps=tallies.acted_on(team, rule, limit=STEPS_SHOWN),
            )
        )
    return panels


def one_rule_yaml(rule: dict[str, Any]) -> str:
    text = set_to_yaml(0, [rule_editable(rule)])
    # The one rule as a mapping: drop the set's `version:` and `rules:` lines and the list dash.
    lines = text.splitlines()[2:]
    return "\n".join(line[2:] if line.startswith(("- ", "  ")) else line for line in lines) + "\n"


def problems_of(draft: list[Any], team: Team | None = None) -> list[str]:
    from policy.services import rules_validate

    return [problem_line(problem) for problem in rules_validate(draft, team=team)]


@dataclass
class ReportView:
    attempts: int
    since: datetime
    capped: bool
    cap: int
    tools_text: str
    rows: list[dict[str, Any]]
    changes: list[dict[str, Any]]


def report_view(report: HistoryReport) -> ReportView:
    data = report.as_json()
    rows = [
        {
            "key": key,
            "label": label,
            "current": data["current"]["outcomes"][key],
            "draft": data["draft"]["outcomes"][key],
        }
        for key, label in OUTCOME_LABELS.items()
    ]
    for key, label in (
        ("would_deny", "shadow: would deny"),
        ("would_hold", "shadow: would hold"),
        ("would_allow", "shadow: would allow"),
    ):
        rows.append(
            {
                "key": key,
                "label": label,
                "current": data["current"]["shadow"][key],
                "draft": data["draft"]["shadow"][key],
            }
        )
    rows.append(
        {
            "key": "errors",
            "label": "evaluation errors",
            "current": data["current"]["errors"],
            "draft": data["draft"]["errors"],
        }
    )
    changes = [
        {
            **change,
            "from_label": OUTCOME_LABELS.get(change["from"], change["from"]),
            "to_label": OUTCOME_LABELS.get(change["to"], change["to"]),
        }
        for change in data["changes"]
    ]
    tools = "every tool" if report.tools is None else ", ".join(report.tools) or "no tool"
    return ReportView(
        attempts=report.attempts,
        since=report.since,
        capped=report.capped,
        cap=ATTEMPTS_CAP,
        tools_text=tools,
        rows=rows,
        changes=changes,
    )


@dataclass
class GrantRow:
    grant: Grant
    words: str
    live: bool
    used_up: bool


def grant_rows(grants: Sequence[Grant], *, now: datetime) -> list[GrantRow]:
    return [
        GrantRow(
            grant=grant, words=_words(grant.when), live=grant_live(grant, now), used_up=grant.uses >= grant.max_uses
        )
        for grant in grants
    ]
