"""The test against history's view of one proposal: policy's own evaluation (the functions the
gate and the holds call), with no grants, turned into one outcome per set.

Outcomes, exclusive: `denied` (an enforced deny), `held` (an enforced require_approval),
`allowed` (neither, and an enforced allow matches: such a call would be approved at once when
its step is held for another reason), `granted` (no rule acts; the gate grants as §4 says)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from policy.evaluation import ALLOW, DENY, REQUIRE_APPROVAL, CallFacts, gate_verdict, hold_verdict

OUTCOMES = ("denied", "held", "allowed", "granted")
SHADOW = ("would_deny", "would_hold", "would_allow")
_SHADOW_OF = {DENY: "would_deny", REQUIRE_APPROVAL: "would_hold", ALLOW: "would_allow"}


@dataclass
class DraftRule:
    """A rule of a draft set, shaped as policy's evaluation reads a rule (its RuleLike). `id` is
    unique per draft text, so the compiled program cache never mixes two drafts' rules."""

    id: Any
    name: str
    version: int
    tools: list[str]
    when: str
    effect: str
    approvals: int
    approvers: str
    mode: str
    enabled: bool


def compiled(rules: Sequence[dict[str, Any]]) -> list[DraftRule]:
    """A valid set (as rules_validate passed it) as evaluable rules."""
    return [
        DraftRule(
            id=("draft", index, rule["name"], rule["when"]),
            name=rule["name"],
            version=int(rule.get("version") or 0),
            tools=list(rule["tools"]),
            when=rule["when"],
            effect=rule["effect"],
            approvals=int(rule.get("approvals") or 1),
            approvers=rule.get("approvers") or "",
            mode=rule.get("mode") or "enforce",
            enabled=rule.get("enabled", True) is not False,
        )
        for index, rule in enumerate(rules)
    ]


def facts_of(*, tool: str, input: Any, run_id: str, attempt: int, code: str, now: datetime) -> CallFacts:
    return CallFacts(
        tool=tool,
        input=input,
        has_input=input is not None,
        run_id=run_id or "",
        key="",
        attempt=attempt,
        code=code,
        state="" if attempt <= 1 else "retry_ready",
        now=now,
    )


@dataclass(frozen=True)
class Outcome:
    outcome: str
    rule: str | None
    shadow: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    per_rule: tuple[tuple[str, str], ...] = field(default=())  # (rule name, match|would_match|error)


def outcome(rules: Sequence[DraftRule], facts: CallFacts) -> Outcome:
    gate = gate_verdict(rules, [], facts)
    verdicts = [gate]
    if gate.effect == DENY:
        result, rule = "denied", gate.rule
    elif gate.effect == REQUIRE_APPROVAL:
        result, rule = "held", gate.rule
    elif not any(r.enabled and r.effect == ALLOW and ("*" in r.tools or facts.tool in r.tools) for r in rules):
        result, rule = "granted", None  # no allow rule to ask: the hold pass would find nothing more
    else:
        held = hold_verdict(rules, [], facts, approvals_required=1)
        verdicts.append(held)
        result, rule = ("allowed", held.rule) if held.effect == ALLOW else ("granted", None)
    shadow: list[str] = [_SHADOW_OF[effect] for _, effect in gate.shadow]
    per_rule: list[tuple[str, str]] = [(r.name, "match") for r in gate.matched]
    per_rule += [(r.name, "would_match") for r, _ in gate.shadow]
    errors = [reason for _, reason in gate.errors]
    per_rule += [(getattr(subject, "name", "?"), "error") for subject, _ in gate.errors]
    if len(verdicts) > 1:
        # The hold pass evaluates denies and holds again: take only what the gate did not see.
        held = verdicts[1]
        shadow += [_SHADOW_OF[ALLOW] for r, effect in held.shadow if effect == ALLOW]
        per_rule += [(r.name, "would_match") for r, effect in held.shadow if effect == ALLOW]
        per_rule += [(r.name, "match") for r in held.matched if r.effect == ALLOW]
        allow_errors = [(s, reason) for s, reason in held.errors if getattr(s, "effect", "") == ALLOW]
        errors += [reason for _, reason in allow_errors]
        per_rule += [(getattr(s, "name", "?"), "error") for s, _ in allow_errors]
    return Outcome(
        outcome=result,
        rule=getattr(rule, "name", None),
        shadow=tuple(shadow),
        errors=tuple(errors),
        per_rule=tuple(per_rule),
    )
