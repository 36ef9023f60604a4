"""The core's side of a team's policy (contract §11): its rules and live grants, read with a
step's context; asked when the attempt gate would grant a call and when a step starts waiting
for approval; and what they did, written in the same transaction (the grant's use, the step's
`policy`, the rules' tallies and the steps they acted on).

The context read brings only "id:version" of the enabled rules naming the tool or "*" and
"id:uses" of the live grants; the rules and grants themselves (with their compiled `when`) are
kept per process by (id, version), so a call costs no read per rule and a rule set's change
costs one read of the changed rules."""

from __future__ import annotations

import copy
import functools
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from accounts.models import ApiKey, Team
from policy import evaluation
from policy.evaluation import ALLOW, DENY, GRANT, REQUIRE_APPROVAL, CallFacts, Verdict
from policy.models import Grant, Rule, RuleAct, RuleTally
from policy.services import grant_use

from . import lifecycle
from .lifecycle import Outcome, Snapshot, State

HELD_BY_RULE = "approval_required_by_rule"


# --- the read ----------------------------------------------------------------------------------


@functools.cache
def policy_ids_sql() -> str:
    """Two columns for the context read (params `team`, `tool`): the team's enabled rules naming
    the tool or "*" as "id:version:stamp,…" in the set's order, and its live grants of the tool
    as "id:stamp:uses,…" (a stamp: the row's updated_at or created_at in microseconds, so that a
    number a rolled-back row had and a new row got is never taken for it). NULL when none."""
    rules, grants = Rule._meta.db_table, Grant._meta.db_table
    return (
        f"(SELECT string_agg(r.id::text || ':' || r.version::text || ':' || {_micros('r.updated_at')}, ',' "  # noqa: S608
        f"ORDER BY r.position, r.id) FROM {rules} r WHERE r.team_id = %(team)s AND r.enabled "
        f"AND (r.tools @> jsonb_build_array(%(tool)s::text) OR r.tools @> '[\"*\"]'::jsonb)), "
        f"(SELECT string_agg(g.id::text || ':' || {_micros('g.created_at')} || ':' || g.uses::text, ',' "
        f"ORDER BY g.id) FROM {grants} g WHERE g.team_id = %(team)s AND g.tool = %(tool)s "
        f"AND g.revoked_at IS NULL AND g.expires_at > statement_timestamp() AND g.uses < g.max_uses)"
    )


def _micros(column: str) -> str:
    return f"(extract(epoch FROM {column}) * 1000000)::bigint::text"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _stamp(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def policy_ids_read(*, team: Team, tool: str, grants: bool = True) -> tuple[str | None, str | None]:
    """The same two values through the ORM (the context read on other databases; `grants`
    False: the rules only)."""
    rules = [
        f"{pk}:{version}:{_stamp(updated_at)}"
        for pk, version, updated_at, tools in Rule.objects.filter(team=team, enabled=True)
        .order_by("position", "id")
        .values_list("id", "version", "updated_at", "tools")
        if "*" in tools or tool in tools
    ]
    if not grants:
        return ",".join(rules) or None, None
    live = Grant.objects.filter(team=team, tool=tool).live().order_by("id")
    triples = live.values_list("id", "created_at", "uses")
    return ",".join(rules) or None, ",".join(f"{pk}:{_stamp(at)}:{uses}" for pk, at, uses in triples) or None


_rules: dict[tuple[int, int, int], Rule] = {}
_rule_sets: dict[str, list[Rule]] = {}
_grants: dict[tuple[int, int], Grant] = {}
_CACHE_LIMIT = 20000


@dataclass(frozen=True)
class TeamPolicy:
    rules: list[Rule] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rules or self.grants)


_NO_POLICY = TeamPolicy()


def _triples(text: str | None) -> list[tuple[int, int, int]]:
    if not text:
        return []
    return [(int(a), int(b), int(c)) for a, b, c in (item.split(":") for item in text.split(","))]


def team_policy(rule_versions: str | None, grant_uses: str | None) -> TeamPolicy:
    """The rules and grants the context read named, from this process's copies (one read of
    those it has not seen at that version)."""
    if not rule_versions and not grant_uses:
        return _NO_POLICY
    rules = _rule_sets.get(rule_versions or "")
    if rules is None:
        rules = _rules_of(_triples(rule_versions))
    grants = []
    for pk, stamp, uses in _grant_triples(grant_uses):
        cached = _grants.get((pk, stamp))
        if cached is not None:
            grant = copy.copy(cached)
            grant.uses = uses  # what changes of a grant is its uses (and revocation: not live, not read)
            grants.append(grant)
    return TeamPolicy(rules=rules, grants=grants)


def _rules_of(rule_keys: list[tuple[int, int, int]]) -> list[Rule]:
    """The rules of these keys (one read of those this process has not seen), kept as one list
    per set, so that the evaluation's grouping of the set is made once (`_named`)."""
    loaded: dict[int, Rule] = {}
    missing_rules = [pk for pk, version, stamp in rule_keys if (pk, version, stamp) not in _rules]
    if missing_rules:
        if len(_rules) > _CACHE_LIMIT:
            _rules.clear()
        for rule in Rule.objects.filter(pk__in=missing_rules):
            _rules[(rule.pk, rule.version, _stamp(rule.updated_at))] = loaded[rule.pk] = rule
    # A rule changed between the two reads is taken as it is now; one deleted meanwhile is gone.
    rules = [found for key in rule_keys if (found := _rules.get(key) or loaded.get(key[0])) is not None]
    if not loaded and rule_keys:
        if len(_rule_sets) > 1024:
            _rule_sets.clear()
        _rule_sets[",".join(f"{a}:{b}:{c}" for a, b, c in rule_keys)] = rules
    return rules


def _grant_triples(grant_uses: str | None) -> list[tuple[int, int, int]]:
    """The grants' keys, their rows read once per process (a grant's fields never change but
    its uses and revocation, which the context read brings)."""
    grant_keys = _triples(grant_uses)
    missing = [pk for pk, stamp, _uses in grant_keys if (pk, stamp) not in _grants]
    if missing:
        if len(_grants) > _CACHE_LIMIT:
            _grants.clear()
        for grant in Grant.objects.filter(pk__in=missing):
            _grants[(grant.pk, _stamp(grant.created_at))] = grant
    return grant_keys


# --- the facts of a call -------------------------------------------------------------------------


def call_facts(
    *,
    tool: str,
    step: Any,
    before: Snapshot,
    input: Any,
    has_input: bool,
    run_id: str,
    api_key: ApiKey | None,
    now: datetime,
) -> CallFacts:
    last = getattr(step, "last_envelope", None) if step is not None else None
    return CallFacts(
        tool=tool,
        input=input,
        has_input=has_input,
        run_id=run_id or (step.run_id if step is not None else ""),
        key=api_key.name if api_key is not None else "",
        attempt=before.attempts + 1,
        code=(last.code if last is not None else "") or "",
        state=before.state.value if before.state else "",
        now=now,
        key_id=api_key.pk if api_key is not None else None,
    )


# --- what acted, as the step and its audit link say it ----------------------------------------


def _rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def policy_of(verdict: Verdict, now: datetime) -> dict[str, Any] | None:
    """`Step.policy` for a verdict that acted: the rule (name, version, when) or the grant
    (id, maker, expiry, uses left after this use), and when."""
    if verdict.effect is None:
        return None
    evaluated_at = _rfc3339(now)
    if verdict.grant is not None:
        grant = verdict.grant
        return {
            "effect": ALLOW,
            "kind": "grant",
            "id": grant.pk,
            "created_by": grant.created_by,
            "expires_at": _rfc3339(grant.expires_at),
            "uses_left": max(0, grant.max_uses - grant.uses - 1),
            "when": grant.when,
            "evaluated_at": evaluated_at,
        }
    rule = verdict.rule
    return {
        "effect": verdict.effect,
        "kind": "rule",
        "name": rule.name,
        "version": rule.version,
        "when": rule.when,
        "evaluated_at": evaluated_at,
    }


def decided_by_of(verdict: Verdict) -> str:
    if verdict.grant is not None:
        return f"grant:{verdict.grant.pk}"
    return f"rule:{verdict.rule.name}@v{verdict.rule.version}"


def audit_data_of(verdict: Verdict) -> dict[str, Any]:
    """What the step's audit link says of the rule or grant (its id and maker for a grant)."""
    if verdict.grant is not None:
        return {"grant": {"id": verdict.grant.pk, "created_by": verdict.grant.created_by}}
    if verdict.rule is not None:
        return {"rule": {"name": verdict.rule.name, "version": verdict.rule.version}}
    return {}


# --- the record: tallies and acts ---------------------------------------------------------------


def tallies_write(verdict: Verdict, *, team_id: int, tool: str, now: datetime) -> None:
    """Add a verdict's matches, would-be matches and errors to its rules' tallies of the day: one
    statement, none when no rule matched or failed (the common call)."""
    counts: Counter[tuple[int, str, str]] = Counter()
    for rule in verdict.matched:
        counts[(rule.pk, rule.effect, "matched")] += 1
    for rule, _effect in verdict.shadow:
        counts[(rule.pk, rule.effect, "would_match")] += 1
    for subject, _reason in verdict.errors:
        if isinstance(subject, Rule):
            counts[(subject.pk, subject.effect, "errors")] += 1
    acted = verdict.rule.pk if verdict.rule is not None and verdict.effect is not None else None
    if acted is not None:
        counts[(acted, verdict.rule.effect, "acted")] += 1
    if not counts:
        return
    rows: dict[tuple[int, str], dict[str, int]] = {}
    for (pk, effect, column), count in counts.items():
        rows.setdefault((pk, effect), {"matched": 0, "would_match": 0, "errors": 0, "acted": 0})[column] += count
    table = RuleTally._meta.db_table
    values: list[str] = []
    params: list[Any] = []
    day = now.date()
    for (pk, effect), row in sorted(rows.items()):
        values.append("(%s, %s, %s, %s, %s, %s, %s, %s, %s)")
        params += [pk, team_id, tool, effect, day, row["matched"], row["would_match"], row["errors"], row["acted"]]
    # PostgreSQL and SQLite both take ON CONFLICT … DO UPDATE with `excluded`.
    sql = (
        f"INSERT INTO {table} (rule_id, team_id, tool, effect, day, matched, would_match, errors, acted) "  # noqa: S608
        f"VALUES {', '.join(values)} ON CONFLICT (rule_id, tool, day, effect) DO UPDATE SET "
        f"matched = {table}.matched + excluded.matched, would_match = {table}.would_match + excluded.would_match, "
        f"errors = {table}.errors + excluded.errors, acted = {table}.acted + excluded.acted"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def act_row(verdict: Verdict, *, team_id: int, tool: str, step_id: int, outcome: str, now: datetime) -> RuleAct:
    """The row that lists a step among those its rule or grant acted on (unsaved)."""
    rule = verdict.rule if verdict.grant is None else None
    return RuleAct(
        team_id=team_id,
        rule=rule,
        grant=verdict.grant,
        name=rule.name if rule is not None else "",
        version=rule.version if rule is not None else None,
        tool=tool,
        step_id=step_id,
        outcome=outcome,
        at=now,
    )


# --- the gate and the holds ----------------------------------------------------------------------


@dataclass
class PolicyConsult:
    """What a door hands `transitions.apply_event` to ask the team's rules: `consult` is called
    with the machine's first answer and may replace the event (a rule's deny or hold at the
    gate); `rows` sets the step's policy fields before the write and gives the rows to write
    with it; `verdict_on_hold` is what acts on a step that started waiting for approval, once
    the step is written (`services.policy_holds`). `audit_data` goes into the plan's links."""

    policy: TeamPolicy
    tool: str
    input: Any
    has_input: bool
    run_id: str
    api_key: ApiKey | None
    now: datetime
    at_gate: bool = False
    audit_data: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    verdict_on_hold: Verdict | None = None
    entered_hold: bool = False

    def audit_data_with(self, data: dict[str, Any] | None) -> dict[str, Any]:
        """The links' data: the caller's, and what `consult` adds to this same dict."""
        self.audit_data.update(data or {})
        return self.audit_data

    def consult(self, step: Any, before: Snapshot, event: Any, outcome: Outcome) -> Any:
        """The event to apply instead, or None."""
        if self.at_gate and isinstance(event, lifecycle.AttemptRequested) and outcome.granted:
            approved = before.approved_at is not None and before.approval_fingerprint == event.fingerprint
            if approved or not self.policy:
                return None  # the approval answered the rules for this input
            verdict = self._gate(step, before)
            self.verdict = verdict
            self.audit_data.update(audit_data_of(verdict) if verdict.effect is not None else {})
            if verdict.effect == DENY:
                return replace(event, rule_effect="deny")
            if verdict.effect == REQUIRE_APPROVAL:
                return replace(event, rule_effect="hold")
            return None
        if _enters_hold(before, outcome):
            self.entered_hold = True
            if self.policy:
                self.verdict_on_hold = self._on_hold(step, before, outcome)
        return None

    def _facts(self, step: Any, before: Snapshot, input: Any, has_input: bool) -> CallFacts:
        return call_facts(
            tool=self.tool,
            step=step,
            before=before,
            input=input,
            has_input=has_input,
            run_id=self.run_id,
            api_key=self.api_key,
            now=self.now,
        )

    def _gate(self, step: Any, before: Snapshot) -> Verdict:
        facts = self._facts(step, before, self.input, self.has_input)
        taken: list[Any] = []
        while True:
            verdict = evaluation.gate_verdict(self.policy.rules, self.policy.grants, facts, exclude_grants=taken)
            if verdict.effect != GRANT or grant_use(grant_id=verdict.grant.pk, now=self.now):
                return verdict
            taken.append(verdict.grant.pk)  # its last use went to another call meanwhile

    def _on_hold(self, step: Any, before: Snapshot, outcome: Outcome) -> Verdict:
        input, has_input = self.input, self.has_input
        if not self.at_gate:  # the input under review is the step's proposal
            from .proposal import proposal_of

            proposal = proposal_of(step) if step is not None else None
            input, has_input = (proposal.input, proposal.input is not None) if proposal is not None else (None, False)
        facts = self._facts(step, before, input, has_input)
        required = step.tool.required_approvals if step is not None else 1
        return evaluation.hold_verdict(self.policy.rules, self.policy.grants, facts, approvals_required=required)

    def rows(self, plan: Any) -> list[Any]:
        """Before the write: the step's `policy`, approvals and group as the verdict says, and
        the rows written with it (the step the rule or grant acted on)."""
        step, verdict = plan.step, self.verdict
        if step is None:
            return []
        rows: list[Any] = []
        if verdict is not None and verdict.effect is not None:
            step.policy = policy_of(verdict, self.now)
            outcome = {DENY: "denied_by_rule", REQUIRE_APPROVAL: HELD_BY_RULE, GRANT: "granted_by_grant"}[
                verdict.effect
            ]
            if verdict.effect == REQUIRE_APPROVAL:
                step.approvals_needed = max(verdict.approvals, step.tool.required_approvals)
                step.approver_group = verdict.approvers
            rows.append(
                act_row(verdict, team_id=step.team_id, tool=self.tool, step_id=step.pk, outcome=outcome, now=self.now)
            )
        elif self.entered_hold:
            # A hold for another reason needs what the tool says, or what a rule matching the
            # input under review asks (more approvals, a group).
            held = self.verdict_on_hold
            if held is not None and held.effect == REQUIRE_APPROVAL:
                step.approvals_needed = held.approvals if held.approvals > step.tool.required_approvals else None
                step.approver_group = held.approvers
                step.policy = policy_of(held, self.now)
            else:
                step.approvals_needed, step.approver_group = None, ""
        return rows

    def written(self, plan: Any) -> None:
        """After the write: the tallies of what was evaluated (one statement at most)."""
        step = plan.step
        if step is None:
            return
        for verdict in (self.verdict, self.verdict_on_hold):
            if verdict is not None:
                tallies_write(verdict, team_id=step.team_id, tool=self.tool, now=self.now)


def _enters_hold(before: Snapshot, outcome: Outcome) -> bool:
    after = outcome.after
    return (
        after.state is State.AWAITING_APPROVAL
        and after.reason != HELD_BY_RULE
        and (before.state is not State.AWAITING_APPROVAL or before.reason != after.reason)
    )


def consult_for(
    *,
    rule_versions: str | None,
    grant_uses: str | None,
    tool: str,
    input: Any,
    has_input: bool,
    run_id: str,
    api_key: ApiKey | None,
    now: datetime,
    at_gate: bool,
) -> PolicyConsult:
    return PolicyConsult(
        policy=team_policy(rule_versions, grant_uses),
        tool=tool,
        input=input,
        has_input=has_input,
        run_id=run_id,
        api_key=api_key,
        now=now,
        at_gate=at_gate,
    )


def consult_for_review(*, team: Team, step: Any, now: datetime) -> PolicyConsult:
    """The consult of a reviewer's act that may send `step` back to review (a permitted retry of
    an input under review): the team's rules and grants read for it (no context read here)."""
    rule_versions, grant_uses = policy_ids_read(team=team, tool=step.tool.name)
    return consult_for(
        rule_versions=rule_versions,
        grant_uses=grant_uses,
        tool=step.tool.name,
        input=None,
        has_input=False,
        run_id=step.run_id,
        api_key=None,
        now=now,
        at_gate=False,
    )


def review_denial(*, team: Team, step: Any, input: Any, now: datetime) -> Verdict:
    """What an enforced deny says of an approval of `input` (§11 "Where rules act" 3)."""
    policy = team_policy(*policy_ids_read(team=team, tool=step.tool.name, grants=False))
    if not policy.rules:
        return Verdict()
    facts = call_facts(
        tool=step.tool.name,
        step=step,
        before=step.snapshot(),
        input=input,
        has_input=input is not None,
        run_id="",
        api_key=None,
        now=now,
    )
    verdict = evaluation.review_denial(policy.rules, facts)
    tallies_write(verdict, team_id=step.team_id, tool=step.tool.name, now=now)
    return verdict


__all__ = ["ALLOW", "DENY", "GRANT", "REQUIRE_APPROVAL", "PolicyConsult", "TeamPolicy"]
