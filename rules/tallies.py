"""What each rule did, as the /rules/ page shows it: per day over a window (policy.RuleTally,
one grouped query for all the team's rules) and the latest steps it acted on (policy.RuleAct,
one indexed query per rule, the steps' refs in one more)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from django.db.models import Sum

from accounts.models import Team
from envelopes.models import Step
from policy.models import Rule, RuleAct, RuleTally

KINDS = (("match", "matches (enforced)"), ("would_match", "would-be matches (shadow)"), ("errors", "evaluation errors"))
ACT_WORDS = {
    "denied_by_rule": "denied",
    "approval_required_by_rule": "held for approval",
    "approved_by_rule": "approved",
    "approved_by_grant": "approved by a grant",
    "granted_by_grant": "granted by a grant",
}


def per_day(team: Team, rules: Sequence[Rule], *, since: datetime) -> dict[int, dict[tuple[date, str], int]]:
    """{rule id: {(day, kind): count}} for the rules' tallies since `since` (every tool summed)."""
    if not rules:
        return {}
    rows = (
        RuleTally.objects.filter(team=team, rule_id__in=[rule.pk for rule in rules], day__gte=since.date())
        .values("rule_id", "day")
        .annotate(n_match=Sum("matched"), n_would_match=Sum("would_match"), n_errors=Sum("errors"))
        .order_by()
    )
    out: dict[int, dict[tuple[date, str], int]] = {}
    for row in rows:
        counts = out.setdefault(row["rule_id"], {})
        counts[(row["day"], "match")] = int(row["n_match"] or 0)
        counts[(row["day"], "would_match")] = int(row["n_would_match"] or 0)
        counts[(row["day"], "errors")] = int(row["n_errors"] or 0)
    return out


def acted_on(team: Team, rule: Rule, *, limit: int) -> list[dict[str, Any]]:
    """The latest steps the rule acted on, newest first (through ruleact_rule_recent_idx)."""
    acts = list(RuleAct.objects.filter(team=team, rule=rule).order_by("-at", "-id")[:limit])
    refs = dict(
        Step.objects.for_team(team).filter(pk__in={act.step_id for act in acts}).values_list("pk", "operation_ref")
    )
    return [
        {
            "step_id": act.step_id,
            "operation_ref": refs.get(act.step_id, f"step {act.step_id}"),
            "tool": act.tool,
            "what": ACT_WORDS.get(act.outcome, act.outcome.replace("_", " "))
            + (f" (v{act.version})" if act.version else ""),
            "at": act.at,
        }
        for act in acts
        if act.step_id in refs
    ]
