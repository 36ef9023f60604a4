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

    known: dict[int, bool] = field(default_factory=dict)  # id(subject) -> its value (`prefetch`)

    def _activation(self) -> Any:
        if self.activation is None:
            self.activation = cel.activation_of(self.facts.bindings())
        return self.activation

    def prefetch(self, subjects: Sequence[Any]) -> None:
        """Evaluate the `when`s of `subjects` in one call (cel.compile_all); when one of them
        fails, none is known and `holds` evaluates each on its own."""
        if len(subjects) < 2:
            return
        try:
            combined = cel.compile_all(tuple(subject.when for subject in subjects))
            values = combined.evaluate(self._activation()) if combined is not None else None
        except Exception:
            return
        if values is not None:
            self.known.update((id(subject), value) for subject, value in zip(subjects, values, strict=True))

    def holds(self, subject: Any, when: str, *, fail_closed: bool) -> bool:
        """Whether `when` is true of the call; a failure (or a `when` that no longer compiles)
        counts as `fail_closed` and is recorded."""
        self.evaluated += 1
        known = self.known.get(id(subject))
        if known is not None:
            return known
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


def _matching(run: _Pass, rules: Iterable[RuleLike], effect: str) -> list[RuleLike]:
    """The enforced rules of `effect` naming the call's tool that match it (shadow ones counted)."""
    tool = run.facts.tool
    named = [r for r in rules if r.enabled and r.effect == effect and ("*" in r.tools or tool in r.tools)]
    run.prefetch(named)
    return [r for r in named if run.rule_matches(r)]


def _live_grant(run: _Pass, grants: Iterable[GrantLike], exclude: Sequence[Any] = ()) -> GrantLike | None:
    facts = run.facts
    covering = [
        grant
        for grant in grants
        if grant.id not in exclude
        and grant.is_live(facts.now)
        and grant.covers(tool=facts.tool, run_id=facts.run_id, key_id=facts.key_id)
    ]
    run.prefetch(covering)
    for grant in covering:
        if run.holds(grant, grant.when, fail_closed=False):
            return grant
    return None


def gate_verdict(
    rules: Sequence[RuleLike], grants: Sequence[GrantLike], facts: CallFacts, *, exclude_grants: Sequence[Any] = ()
) -> Verdict:
    """The attempt gate's order (§11 "Where rules act" 1): an enforced deny; else a live grant;
    else an enforced require_approval; else nothing (granted as the §4 rules say). `allow` rules
    do not act at the gate (nothing there to release) and are not evaluated. Shadow rules of
    each stage reached are evaluated and counted. `exclude_grants`: grants whose last use another
    call took meanwhile (the caller asks again without them)."""
    run = _Pass(facts)
    denies = _matching(run, rules, DENY)
    if denies:
        return run.verdict(effect=DENY, rule=denies[0])
    grant = _live_grant(run, grants, exclude_grants)
    if grant is not None:
        return run.verdict(effect=GRANT, grant=grant)
    holds = _matching(run, rules, REQUIRE_APPROVAL)
    if holds:
        strictest = max(holds, key=lambda r: r.approvals)
        approvers = next((r.approvers for r in holds if r.approvers), "")
        return run.verdict(effect=REQUIRE_APPROVAL, rule=strictest, approvals=strictest.approvals, approvers=approvers)
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
    denies = _matching(run, rules, DENY)
    if denies:
        return run.verdict(effect=DENY, rule=denies[0])
    holds = _matching(run, rules, REQUIRE_APPROVAL)
    needed = max([approvals_required, *(r.approvals for r in holds)])
    if needed == 1:
        grant = _live_grant(run, grants, exclude_grants)
        if grant is not None:
            return run.verdict(effect=GRANT, grant=grant)
    if holds:
        strictest = max(holds, key=lambda r: r.approvals)
        approvers = next((r.approvers for r in holds if r.approvers), "")
        return run.verdict(effect=REQUIRE_APPROVAL, rule=strictest, approvals=needed, approvers=approvers)
    if needed == 1:
        allows = _matching(run, rules, ALLOW)
        if allows:
            return run.verdict(effect=ALLOW, rule=allows[0])
    return run.verdict()


def review_denial(rules: Sequence[RuleLike], facts: CallFacts) -> Verdict:
    """A reviewer's approval of `facts.input` (§11 "Where rules act" 3): DENY when an enforced
    deny matches it (a failure counts as a match), else nothing."""
    run = _Pass(facts)
    denies = _matching(run, rules, DENY)
    return run.verdict(effect=DENY, rule=denies[0]) if denies else run.verdict()
