"""Pure evaluation of a team's rules and live grants for one call (contract §11): no database,
no clock of its own. The gate and the holds in the core ask `gate_verdict` and `hold_verdict`;
the test against history asks the same functions over past proposals."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from . import cel
from .errors import WhenInvalid

DENY, REQUIRE_APPROVAL, ALLOW = "deny", "require_approval", "allow"
GRANT = "grant"  # a live grant matched


class RuleLike(Protocol):
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


class GrantLike(Protocol):
    id: Any
    tool: str
    when: str
    created_by: str
    expires_at: datetime

    def is_live(self, now: datetime) -> bool: ...

    def covers(self, *, tool: str, run_id: str, key_id: int | None) -> bool: ...


@dataclass(frozen=True)
class CallFacts:
    """One call as its rules see it (the CEL variables of §11), and what a grant's scope needs."""

    tool: str
    input: Any  # the proposed input as stored (redacted), or None
    has_input: bool
    run_id: str
    key: str  # the API key's name ("" when no key made the call)
    attempt: int  # the attempt number the call would get
    code: str  # the last envelope's code, "" when none
    state: str  # the step's state ("" for a step not created yet)
    now: datetime
    key_id: int | None = None

    def bindings(self) -> dict[str, Any]:
        return cel.bindings_of(
            tool=self.tool,
            input=self.input,
            has_input=self.has_input,
            run_id=self.run_id,
            key=self.key,
            attempt=self.attempt,
            code=self.code,
            state=self.state,
            now=self.now,
        )


@dataclass(frozen=True)
class Verdict:
    """What the rules and grants say of one call. `effect`: DENY, GRANT, REQUIRE_APPROVAL or
    ALLOW when one of them acts, else None; `rule` or `grant` is what decided (for
    REQUIRE_APPROVAL the rule needing the most approvals); `approvals` and `approvers` what a
    hold needs. `matched`: the enforced rules whose `when` held (or failed closed), `shadow`:
    (rule, its effect) for shadow rules that would have matched, `errors`: (rule or grant,
    reason) for evaluations that failed."""

    effect: str | None = None
    rule: Any = None
    grant: Any = None
    approvals: int = 1
    approvers: str = ""
    matched: tuple[Any, ...] = ()
    shadow: tuple[tuple[Any, str], ...] = ()
    errors: tuple[tuple[Any, str], ...] = ()
    evaluated: int = 0

    @property
    def acted(self) -> bool:
        return self.effect is not None


@dataclass
class _Pass:
    facts: CallFacts
    activation: Any = None
    evaluated: int = 0
    matched: list[Any] = field(default_factory=list)
    shadow: list[tuple[Any, str]] = field(default_factory=list)
    errors: list[tuple[Any, str]] = field(default_factory=list)

    def _activation(self) -> Any:
        if self.activation is None:
            self.activation = cel.activation_of(self.facts.bindings())
        return self.activation

    def prefetch(self, subjects: Sequence[Any]) -> list[bool] | None:
        """The values of the `when`s of `subjects`, evaluated in one call (cel.compile_all);
        None when one of them fails (or fewer than two were asked): then `holds` evaluates each
        on its own."""
        if len(subjects) < 2:
            return None
        try:
            combined = cel.compile_all(tuple([subject.when for subject in subjects]))
            return combined.evaluate(self._activation()) if combined is not None else None
        except Exception:
            return None

    def holds(self, subject: Any, when: str, *, fail_closed: bool) -> bool:
        """Whether `when` is true of the call; a failure (or a `when` that no longer compiles)
        counts as `fail_closed` and is recorded."""
        self.evaluated += 1
        try:
            return program_of(subject, when).evaluate(self._activation())
        except (cel.EvaluationError, WhenInvalid) as error:
            self.errors.append((subject, str(error)))
            return fail_closed
        except Exception as error:  # the library's own: a failure is never a grant
            self.errors.append((subject, f"evaluation failed: {error}"))
            return fail_closed

    def rule_matches(self, rule: RuleLike) -> bool:
        """An enabled rule of the call's tool, evaluated; a shadow one only counted (False)."""
        matched = self.holds(rule, rule.when, fail_closed=rule.effect != ALLOW)
        if not matched:
            return False
        if rule.mode == "shadow":
            self.shadow.append((rule, rule.effect))
            return False
        self.matched.append(rule)
        return True

    def verdict(self, **decided: Any) -> Verdict:
        return Verdict(
            matched=tuple(self.matched),
            shadow=tuple(self.shadow),
            errors=tuple(self.errors),
            evaluated=self.evaluated,
            **decided,
        )


_programs: dict[tuple[str, Any, int | None], cel.CompiledWhen] = {}


def program_of(subject: Any, when: str) -> cel.CompiledWhen:
    """`when` compiled once per rule version (or grant) per process; another text under the same
    key (a row edited behind the services' back) is compiled anew."""
    key = (type(subject).__name__, getattr(subject, "id", None), getattr(subject, "version", None))
    program = _programs.get(key)
    if program is None or program.text != when:
        program = cel.compile_when(when)
        if len(_programs) > 8192:
            _programs.clear()
        _programs[key] = program
    return program


_named_memo: dict[tuple[int, str], tuple[Sequence[Any], dict[str, list[Any]]]] = {}


def _named(rules: Sequence[RuleLike], tool: str) -> dict[str, list[RuleLike]]:
    """The enabled rules naming the call's tool (or "*"), by effect, in the set's order; kept for
    the same list (a caller's cached rule set) and tool."""
    key = (id(rules), tool)
    memo = _named_memo.get(key)
    if memo is not None and memo[0] is rules:
        return memo[1]
    named: dict[str, list[RuleLike]] = {DENY: [], REQUIRE_APPROVAL: [], ALLOW: []}
    for rule in rules:
        if rule.enabled and ("*" in rule.tools or tool in rule.tools):
            named[rule.effect].append(rule)
    if len(_named_memo) > 4096:
        _named_memo.clear()
    _named_memo[key] = (rules, named)
    return named


def _covering(grants: Iterable[GrantLike], facts: CallFacts, exclude: Sequence[Any]) -> list[GrantLike]:
    """The live grants whose tool and scope cover the call (their `when` aside)."""
    return [
        grant
        for grant in grants
        if grant.id not in exclude
        and grant.is_live(facts.now)
        and grant.covers(tool=facts.tool, run_id=facts.run_id, key_id=facts.key_id)
    ]


def _matching(run: _Pass, named: list[RuleLike], values: list[bool] | None) -> list[RuleLike]:
    """The enforced rules of `named` that match the call (shadow ones counted); `values`: their
    `when`s' values if known (`_Pass.prefetch`), else each is evaluated."""
    if values is None:
        return [rule for rule in named if run.rule_matches(rule)]
    run.evaluated += len(named)
    matched = []
    for rule, value in zip(named, values, strict=True):
        if not value:
            continue
        if rule.mode == "shadow":
            run.shadow.append((rule, rule.effect))
        else:
            run.matched.append(rule)
            matched.append(rule)
    return matched


def _split(values: list[bool] | None, *sizes: int) -> list[list[bool] | None]:
    """`values` cut into consecutive parts of `sizes` (all None when unknown)."""
    if values is None:
        return [None] * len(sizes)
    parts: list[list[bool] | None] = []
    at = 0
    for size in sizes:
        parts.append(values[at : at + size])
        at += size
    return parts


def _first_grant(run: _Pass, covering: list[GrantLike], values: list[bool] | None) -> GrantLike | None:
    if values is not None:
        run.evaluated += len(covering)
        return next((grant for grant, value in zip(covering, values, strict=True) if value), None)
    for grant in covering:
        if run.holds(grant, grant.when, fail_closed=False):
            return grant
    return None


def _hold(run: _Pass, holds: list[RuleLike], needed: int) -> Verdict:
    strictest = max(holds, key=lambda r: r.approvals)
    approvers = next((r.approvers for r in holds if r.approvers), "")
    return run.verdict(effect=REQUIRE_APPROVAL, rule=strictest, approvals=needed, approvers=approvers)


def gate_verdict(
    rules: Sequence[RuleLike], grants: Sequence[GrantLike], facts: CallFacts, *, exclude_grants: Sequence[Any] = ()
) -> Verdict:
    """The attempt gate's order (§11 "Where rules act" 1): an enforced deny; else a live grant;
    else an enforced require_approval; else nothing (granted as the §4 rules say). `allow` rules
    do not act at the gate (nothing there to release) and are not evaluated. Shadow rules of
    each stage reached are counted. `exclude_grants`: grants whose last use another call took
    meanwhile (the caller asks again without them). Every `when` asked is evaluated in one call
    into the library (`_Pass.prefetch`)."""
    run = _Pass(facts)
    named = _named(rules, facts.tool)
    covering = _covering(grants, facts, exclude_grants)
    values = run.prefetch([*named[DENY], *covering, *named[REQUIRE_APPROVAL]])
    of_denies, of_grants, of_holds = _split(values, len(named[DENY]), len(covering), len(named[REQUIRE_APPROVAL]))
    denies = _matching(run, named[DENY], of_denies)
    if denies:
        return run.verdict(effect=DENY, rule=denies[0])
    grant = _first_grant(run, covering, of_grants)
    if grant is not None:
        return run.verdict(effect=GRANT, grant=grant)
    holds = _matching(run, named[REQUIRE_APPROVAL], of_holds)
    if holds:
        return _hold(run, holds, max(r.approvals for r in holds))
    return run.verdict()


def hold_verdict(
    rules: Sequence[RuleLike],
    grants: Sequence[GrantLike],
    facts: CallFacts,
    *,
    approvals_required: int,
    exclude_grants: Sequence[Any] = (),
) -> Verdict:
    """A step entering awaiting_approval for another reason (§11 "Where rules act" 2): an
    enforced deny of the proposal (DENY); else, when the step needs one approval (the tool's
    count and that of any enforced require_approval matching it), a live grant (GRANT); else an
    enforced require_approval that matches says what the hold needs (REQUIRE_APPROVAL with its
    approvals and group; it keeps an `allow` rule from releasing the step: the team asked for a
    human); else, needing one approval, an enforced allow (ALLOW). A grant beats a one-approval
    require_approval as at the gate (a human made the grant). Nothing but reviewers releases a
    step needing two approvals."""
    run = _Pass(facts)
    named = _named(rules, facts.tool)
    covering = _covering(grants, facts, exclude_grants)
    values = run.prefetch([*named[DENY], *named[REQUIRE_APPROVAL], *covering, *named[ALLOW]])
    of_denies, of_holds, of_grants, of_allows = _split(
        values, len(named[DENY]), len(named[REQUIRE_APPROVAL]), len(covering), len(named[ALLOW])
    )
    denies = _matching(run, named[DENY], of_denies)
    if denies:
        return run.verdict(effect=DENY, rule=denies[0])
    holds = _matching(run, named[REQUIRE_APPROVAL], of_holds)
    needed = max([approvals_required, *(r.approvals for r in holds)])
    if needed == 1:
        grant = _first_grant(run, covering, of_grants)
        if grant is not None:
            return run.verdict(effect=GRANT, grant=grant)
    if holds:
        return _hold(run, holds, needed)
    if needed == 1:
        allows = _matching(run, named[ALLOW], of_allows)
        if allows:
            return run.verdict(effect=ALLOW, rule=allows[0])
    return run.verdict()


def review_denial(rules: Sequence[RuleLike], facts: CallFacts) -> Verdict:
    """A reviewer's approval of `facts.input` (§11 "Where rules act" 3): DENY when an enforced
    deny matches it (a failure counts as a match), else nothing."""
    run = _Pass(facts)
    named = _named(rules, facts.tool)[DENY]
    denies = _matching(run, named, run.prefetch(named))
    return run.verdict(effect=DENY, rule=denies[0]) if denies else run.verdict()
