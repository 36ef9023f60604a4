"""The step state machine of the contract (§3), as pure functions over its tables (`states`).

No Django here: `advance(snapshot, event, now)` answers what happens to a step when something
arrives (an envelope, an attempt request, a verification report, a timer, a reviewer's act),
and the services apply that answer under a row lock with its audit entry. Every pair
(state, event) is covered by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from envelopes.lifecycle_events import (
    AttemptRequested,
    EnvelopeArrived,
    EnvelopeRejected,
    Event,
    ReviewerActed,
    RuleDenied,
    TimerFired,
    VerificationReported,
)
from envelopes.states import (
    ACTION,
    APPROVAL_LAPSE,
    DUPLICATE_PREVENTING,
    HUMAN_HELD,
    NEXT_ACTION_TARGET,
    RETRYING_ACTIONS,
    REVIEWER_ACTS,
    TERMINAL,
    TIMER_OF,
    State,
)


@dataclass(frozen=True)
class Snapshot:
    """What the machine needs to know about a step (None state: the step does not exist)."""

    state: State | None = None
    reason: str = ""
    attempts: int = 0
    max_attempts: int = 3
    last_fingerprint: str = ""
    last_attempt_reported: bool = True
    # The input an approval binds (the attempt that asked for it; "" when none: nothing is
    # bound), kept in whatever state the step is moved to until a granted attempt uses it or the
    # step closes (contract §3). Its standing is one of two, never both, whatever the state:
    # - under review since `review_started_at` (the step asked for approval): the quorum counts
    #   the approvals given since then (approvals.services), and the gate grants nothing;
    # - approved at `approved_at` (the approval that completed the quorum): the gate grants that
    #   input only, until `approval_lapses_at` (approved_at + the tool's approval_ttl_s).
    approval_fingerprint: str = ""
    review_started_at: datetime | None = None
    approved_at: datetime | None = None
    approval_lapses_at: datetime | None = None
    not_before: datetime | None = None
    trusted_after: datetime | None = None
    deadline: datetime | None = None
    expires_at: datetime | None = None
    halted_until: datetime | None = None

    @property
    def under_review(self) -> bool:
        """The step asked for approval and the quorum has not approved yet. A binding with
        neither standing (none is written so) counts as under review: never as approved."""
        return self.approved_at is None and (self.review_started_at is not None or bool(self.approval_fingerprint))

    @property
    def state_due_at(self) -> datetime | None:
        """When the timer of this step's state fires, if its state waits on one."""
        return {
            State.WAITING_RETRY: self.not_before,
            State.VERIFYING: self.deadline,
            State.AWAITING_APPROVAL: self.expires_at,
        }.get(self.state)  # type: ignore[arg-type]

    @property
    def due_at(self) -> datetime | None:
        """When this step's next timer fires: its state's, or its approval's lapse if sooner
        (both may be pending: a retry window, say, and the approval it will use)."""
        due = [at for at in (self.state_due_at, self.approval_lapses_at) if at is not None]
        return min(due) if due else None

    def due_timer(self, now: datetime) -> str | None:
        """The timer the sweep fires now (None: none is due). The lapse first: an expired
        approval cancels, whatever else was due (expiry never guesses towards a write)."""
        if self.approval_lapses_at is not None and self.approval_lapses_at <= now:
            return APPROVAL_LAPSE
        due = self.state_due_at
        if due is not None and due <= now:
            return TIMER_OF[self.state]  # type: ignore[index]
        return None


@dataclass(frozen=True)
class Outcome:
    """The machine's answer: the step after the event, and what the caller must know."""

    after: Snapshot
    changed: bool  # the state (or its reason) changed: one audit entry, one webhook
    granted: bool = False  # the attempt gate granted an attempt
    refusal: str = ""  # the attempt gate's refusal code
    retry_after: datetime | None = None  # for refusals that carry Retry-After
    directive_reason: str = ""  # overrides the step's reason in the answer's directive
    directive_not_before: datetime | None = None
    ignored: bool = False  # the event had no effect on this state (e.g. a stale timer)
    effects: tuple[str, ...] = field(default_factory=tuple)

    @property
    def duplicate_prevented(self) -> bool:
        return self.refusal in DUPLICATE_PREVENTING


def directive(snapshot: Snapshot, *, reason: str = "", not_before: datetime | None = None) -> dict:
    """What the agent runtime may do now, from the state alone (never from free text)."""
    if snapshot.state is None:
        # A step refused before it existed (its tool is halted): wait.
        return {"action": "wait", "may_write": False, "not_before": not_before, "reason": reason}
    state = snapshot.state
    action = ACTION[state]
    if not_before is None:
        if state is State.WAITING_RETRY:
            not_before = snapshot.not_before
        elif state is State.VERIFYING:
            not_before = snapshot.trusted_after
    return {
        "action": action,
        "may_write": action == "proceed",
        "not_before": not_before,
        "reason": reason or snapshot.reason,
    }


_NO_BINDING: dict[str, Any] = {
    "approval_fingerprint": "",
    "review_started_at": None,
    "approved_at": None,
    "approval_lapses_at": None,
}


def _under_review(fingerprint: str, since: datetime) -> dict[str, Any]:
    """A binding under review since `since` (no longer approved, if it was)."""
    return {
        "approval_fingerprint": fingerprint,
        "review_started_at": since,
        "approved_at": None,
        "approval_lapses_at": None,
    }


def _enter(before: Snapshot, state: State, reason: str, **changes) -> Snapshot:
    """The snapshot after entering `state`: timers of the old state are cleared."""
    base: dict[str, Any] = {
        "not_before": None,
        "trusted_after": None,
        "deadline": None,
        "expires_at": None,
    }
    if state in TERMINAL:
        # A closed step runs nothing: its binding has nothing left to bind. Every other move
        # keeps it (contract §3: it lasts until a granted attempt uses it).
        base.update(_NO_BINDING)
    base.update(changes)
    return replace(before, state=state, reason=reason, **base)


def _moved(before: Snapshot, after: Snapshot, **kwargs) -> Outcome:
    changed = (after.state, after.reason) != (before.state, before.reason)
    return Outcome(after=after, changed=changed, **kwargs)


def _unchanged(before: Snapshot, **kwargs) -> Outcome:
    return Outcome(after=before, changed=False, **kwargs)


def advance(before: Snapshot, event: Event, now: datetime) -> Outcome:
    """Apply one event to one step."""
    if isinstance(event, EnvelopeArrived):
        return _on_envelope(before, event, now)
    if isinstance(event, EnvelopeRejected):
        return _on_rejected_envelope(before)
    if isinstance(event, AttemptRequested):
        return _on_attempt(before, event, now)
    if isinstance(event, VerificationReported):
        return _on_verification(before, event, now)
    if isinstance(event, TimerFired):
        return _on_timer(before, event, now)
    if isinstance(event, ReviewerActed):
        return _on_reviewer(before, event, now)
    if isinstance(event, RuleDenied):
        return _on_rule_denied(before)
    raise TypeError(f"unknown event {event!r}")


def _on_envelope(before: Snapshot, event: EnvelopeArrived, now: datetime) -> Outcome:
    if before.state in TERMINAL:
        return _unchanged(before, directive_reason="step_closed", ignored=True)
    attempts = max(before.attempts, event.attempt or 0)
    reported = replace(before, attempts=attempts, last_attempt_reported=True)
    occurred_at = event.occurred_at or now

    if event.ok or event.commit_state == "committed":
        return _moved(before, _enter(reported, State.SUCCEEDED, "committed"))

    if before.state in HUMAN_HELD:
        return Outcome(after=reported, changed=False)

    action = event.next_action or "escalate"
    if action in RETRYING_ACTIONS and (event.max_attempts_remaining == 0 or attempts >= before.max_attempts):
        after = _enter(reported, State.ESCALATED, "attempt_budget_exhausted")
        return _moved(before, after, effects=("attempt_budget_exhausted",))

    state, reason = NEXT_ACTION_TARGET[action]
    changes: dict = {}
    if state is State.WAITING_RETRY:
        changes["not_before"] = event.not_before or now
    elif state is State.VERIFYING:
        changes["trusted_after"] = occurred_at + timedelta(seconds=event.consistency_window_s)
        changes["deadline"] = occurred_at + timedelta(seconds=event.verification_deadline_s)
    elif state is State.AWAITING_APPROVAL:
        changes["expires_at"] = now + timedelta(seconds=event.approval_ttl_s)
        # Approval is bound to the input of the attempt that asked for it, if any; an approval
        # not yet used stays the input under review (the agent has run nothing since). A new
        # request is a new review: the quorum counts from now, and an approval given before
        # releases nothing any more.
        binding = before.approval_fingerprint or (before.last_fingerprint if before.attempts else "")
        changes |= _under_review(binding, now)
    after = _enter(reported, state, reason, **changes)
    if after == before:
        return _unchanged(before)
    # A repeated envelope into the same state refreshes its timers but is no new transition.
    return _moved(before, after)


def _on_rejected_envelope(before: Snapshot) -> Outcome:
    if before.state in TERMINAL:
        return _unchanged(before, directive_reason="step_closed", ignored=True)
    after = _enter(before, State.ESCALATED, "malformed_envelope")
    return _moved(before, after)


def _refuse(before: Snapshot, code: str, *, after: Snapshot | None = None, **kwargs) -> Outcome:
    target = after or before
    return Outcome(
        after=target,
        changed=(target.state, target.reason) != (before.state, before.reason),
        refusal=code,
        directive_reason=code,
        **kwargs,
    )


def _grant(before: Snapshot, fingerprint: str) -> Outcome:
    after = _enter(
        before,
        State.IN_PROGRESS,
        "attempt_granted",
        attempts=before.attempts + 1,
        last_fingerprint=fingerprint,
        last_attempt_reported=False,
        **_NO_BINDING,  # the one thing that uses up an approval
    )
    return Outcome(after=after, changed=True, granted=True)


def _grant_unless_ruled(before: Snapshot, event: AttemptRequested, now: datetime) -> Outcome:
    """A call the §4 rules grant, unless the team's rules said otherwise (§11): a deny refuses
    it to needs_input, a hold sends it to a reviewer with its input under review. Not for the
    input an approval bound: the approval answered the rules for it."""
    if before.approved_at is not None and before.approval_fingerprint == event.fingerprint:
        return _grant(before, event.fingerprint)
    if event.rule_effect == "deny":
        return _refuse(before, "denied_by_rule", after=_enter(before, State.NEEDS_INPUT, "denied_by_rule"))
    if event.rule_effect == "hold":
        after = _enter(
            before,
            State.AWAITING_APPROVAL,
            "approval_required_by_rule",
            expires_at=now + timedelta(seconds=event.approval_ttl_s),
            **_under_review(event.fingerprint, now),
        )
        return _refuse(before, "approval_required", after=after)
    return _grant(before, event.fingerprint)


def _on_rule_denied(before: Snapshot) -> Outcome:
    if before.state is not State.AWAITING_APPROVAL:
        return _unchanged(before, ignored=True)
    # The binding stays under review: another input the agent sends goes to a reviewer again.
    return _moved(before, _enter(before, State.NEEDS_INPUT, "denied_by_rule"))


def _on_attempt(before: Snapshot, event: AttemptRequested, now: datetime) -> Outcome:
    state = before.state
    halted = before.halted_until is not None and before.halted_until > now
    if state is None:
        if halted:
            # Nothing exists to hold: refuse without creating the step.
            return _refuse(before, "tool_halted", retry_after=before.halted_until)
        return _grant_unless_ruled(before, event, now)
    if state is State.SUCCEEDED:
        return _refuse(before, "already_committed")
    if state in TERMINAL:
        return _refuse(before, "step_closed")
    if state is State.VERIFYING:
        return _refuse(before, "verification_required")
    if state is State.IN_PROGRESS and not before.last_attempt_reported:
        # The last granted attempt never reported back: its write may have happened.
        after = _enter(
            before,
            State.VERIFYING,
            "attempt_unreported",
            trusted_after=now + timedelta(seconds=event.consistency_window_s),
            deadline=now + timedelta(seconds=event.verification_deadline_s),
        )
        return _refuse(before, "verification_required", after=after)
    if state is State.ESCALATED:
        if before.reason == "attempt_budget_exhausted":
            return _refuse(before, "attempt_budget_exhausted")
        return _refuse(before, "escalated")
    if state is State.AWAITING_APPROVAL:
        return _refuse(before, "approval_pending")
    if before.under_review:
        # Only the quorum releases an input under review (contract §3 v1.2): back to its
        # reviewers, with a fresh expiry. The same input keeps its count (approvals count per
        # fingerprint since the review started); another one is a new review (below).
        if not before.approval_fingerprint or event.fingerprint == before.approval_fingerprint:
            after = _enter(
                before,
                State.AWAITING_APPROVAL,
                "approval_pending",
                expires_at=now + timedelta(seconds=event.approval_ttl_s),
                **_under_review(before.approval_fingerprint, before.review_started_at or now),
            )
            return _refuse(before, "approval_pending", after=after)
        return _refuse_mismatch(before, event, now)
    if before.approval_lapses_at is not None and before.approval_lapses_at <= now:
        # The approval lapsed and the sweep has not come by yet: the gate applies the lapse
        # itself, so no attempt is granted on an approval older than its TTL.
        after = _enter(before, State.CANCELLED, "approval_expired")
        return _refuse(before, "step_closed", after=after, effects=("approval_expired",))
    if halted:
        return _refuse(before, "tool_halted", retry_after=before.halted_until)
    if state is State.WAITING_RETRY and before.not_before and before.not_before > now:
        return _refuse(
            before,
            "retry_not_before",
            retry_after=before.not_before,
            directive_not_before=before.not_before,
        )
    if before.approval_fingerprint and event.fingerprint != before.approval_fingerprint:
        return _refuse_mismatch(before, event, now)
    if state is State.NEEDS_INPUT and before.attempts and event.fingerprint == before.last_fingerprint:
        return _refuse(before, "identical_retry")
    # in_progress (reported), needs_input (changed input), retry_ready, waiting_retry past due.
    return _grant_unless_ruled(before, event, now)


def _refuse_mismatch(before: Snapshot, event: AttemptRequested, now: datetime) -> Outcome:
    """An approval not yet used binds whatever the step went through since (needs_input,
    waiting_retry, a verification...): another input goes back to a reviewer, and the input that
    asked is the one the next approval binds, a new review counted from now."""
    after = _enter(
        before,
        State.AWAITING_APPROVAL,
        "approval_mismatch",
        expires_at=now + timedelta(seconds=event.approval_ttl_s),
        **_under_review(event.fingerprint, now),
    )
    return _refuse(before, "approval_mismatch", after=after)


def _on_verification(before: Snapshot, event: VerificationReported, now: datetime) -> Outcome:
    if before.state in TERMINAL:
        return _unchanged(before, directive_reason="step_closed", ignored=True)
    if event.outcome == "committed":
        after = _enter(before, State.SUCCEEDED, "verified_committed", last_attempt_reported=True)
        return _moved(before, after, effects=_resolved_by_verification(before))
    if before.state is not State.VERIFYING:
        # A lookup that finds nothing proves nothing outside a verification.
        return _unchanged(before, ignored=True)
    if event.outcome == "not_found":
        if before.trusted_after and now < before.trusted_after:
            return _unchanged(before, directive_not_before=before.trusted_after)
        after = _enter(before, State.RETRY_READY, "verified_not_found", last_attempt_reported=True)
        return _moved(before, after, effects=("resolved_by_verification",))
    after = _enter(before, State.ESCALATED, "verification_unavailable")
    return _moved(before, after)


def _resolved_by_verification(before: Snapshot) -> tuple[str, ...]:
    return ("resolved_by_verification",) if before.state is State.VERIFYING else ()


def _on_timer(before: Snapshot, event: TimerFired, now: datetime) -> Outcome:
    state = before.state
    if event.timer == APPROVAL_LAPSE:
        lapses = before.approval_lapses_at
        if state is None or state in TERMINAL or lapses is None or lapses > now:
            return _unchanged(before, ignored=True)
        after = _enter(before, State.CANCELLED, "approval_expired")
        return _moved(before, after, effects=("approval_expired",))
    if state is None or TIMER_OF.get(state) != event.timer:
        return _unchanged(before, ignored=True)
    due = before.state_due_at
    if due is None or due > now:
        return _unchanged(before, ignored=True)
    if state is State.WAITING_RETRY:
        return _moved(before, _enter(before, State.RETRY_READY, "retry_window_open"))
    if state is State.VERIFYING:
        return _moved(before, _enter(before, State.ESCALATED, "verification_timeout"))
    if event.on_expiry == "escalate":
        # Escalated, not cancelled (§12): the input stays under review, never approved by time.
        return _moved(before, _enter(before, State.ESCALATED, "approval_expired"), effects=("approval_expired",))
    after = _enter(before, State.CANCELLED, "approval_expired")
    return _moved(before, after, effects=("approval_expired",))


def _on_reviewer(before: Snapshot, event: ReviewerActed, now: datetime) -> Outcome:
    acts = REVIEWER_ACTS.get(before.state, {})  # type: ignore[arg-type]
    if event.action not in acts:
        return _unchanged(before, ignored=True)
    state, reason = acts[event.action]
    if event.action == "approve" and event.reason:
        reason = event.reason  # approved_by_rule / approved_by_grant
    if event.action == "permit_retry" and before.under_review:
        # A retry of an input only under review is the quorum's to permit (contract §3 v1.2):
        # back to awaiting_approval, its count going on, with a fresh expiry.
        after = _enter(
            before,
            State.AWAITING_APPROVAL,
            "approval_pending",
            expires_at=now + timedelta(seconds=event.approval_ttl_s),
            **_under_review(before.approval_fingerprint, before.review_started_at or now),
        )
        return _moved(before, after)
    after = _enter(before, state, reason)
    if state is State.RETRY_READY:
        after = replace(after, last_attempt_reported=True)
    if event.action == "approve":
        # The act the services feed only once the quorum is complete: the binding is approved.
        binding = before.approval_fingerprint if event.fingerprint is None else event.fingerprint
        after = replace(
            after,
            approval_fingerprint=binding,
            review_started_at=None,
            approved_at=now,
            approval_lapses_at=now + timedelta(seconds=event.approval_ttl_s),
        )
    return _moved(before, after)


def allowed_reviewer_actions(state: State | None) -> tuple[str, ...]:
    return tuple(REVIEWER_ACTS.get(state, {}))  # type: ignore[arg-type]
