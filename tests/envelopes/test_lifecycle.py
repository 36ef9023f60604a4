"""The state machine of contract §3: every (state, event) pair, and its invariants."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopes import lifecycle
from envelopes.lifecycle import (
    AttemptRequested,
    EnvelopeArrived,
    EnvelopeRejected,
    ReviewerActed,
    Snapshot,
    TimerFired,
    VerificationReported,
    advance,
)
from envelopes.states import EDGES, HELD, INITIAL, REASONS, TERMINAL, State

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=2)
FP_A = "a" * 64
FP_B = "b" * 64


def at(state: State | None, **changes) -> Snapshot:
    base = Snapshot(
        state=state, reason=next(iter(sorted(REASONS[state]))) if state else "", attempts=1, last_fingerprint=FP_A
    )
    return replace(base, **changes)


def error(next_action: str, **changes) -> EnvelopeArrived:
    fields = {"ok": False, "commit_state": "not_committed", "next_action": next_action, "max_attempts_remaining": 2}
    if next_action == "wait_and_retry":
        fields["not_before"] = NOW + timedelta(minutes=1)
    if next_action == "verify_operation":
        fields["commit_state"] = "unknown"
        fields["max_attempts_remaining"] = 0
    fields.update(changes)
    return EnvelopeArrived(**fields)


ENVELOPE_TARGETS = {
    "correct_input": (State.NEEDS_INPUT, "input_fix_required"),
    "wait_and_retry": (State.WAITING_RETRY, "retry_not_before"),
    "verify_operation": (State.VERIFYING, "verification_required"),
    "request_approval": (State.AWAITING_APPROVAL, "approval_pending"),
    "escalate": (State.ESCALATED, "escalation_requested"),
    "abort": (State.FAILED, "aborted"),
}
LIVE = [s for s in State if s not in TERMINAL]


# --- envelopes -------------------------------------------------------------------------------


AGENT_SIDE = [None, State.IN_PROGRESS, State.NEEDS_INPUT, State.WAITING_RETRY, State.RETRY_READY]


@pytest.mark.parametrize("state", AGENT_SIDE)
@pytest.mark.parametrize("next_action", sorted(ENVELOPE_TARGETS))
def test_an_error_envelope_moves_an_agent_side_step_by_its_next_action(state, next_action) -> None:
    outcome = advance(at(state), error(next_action), NOW)
    assert (outcome.after.state, outcome.after.reason) == ENVELOPE_TARGETS[next_action]


@pytest.mark.parametrize("state", sorted(lifecycle.HUMAN_HELD))
@pytest.mark.parametrize("next_action", sorted(ENVELOPE_TARGETS))
def test_an_error_envelope_never_releases_a_human_hold(state, next_action) -> None:
    before = at(state, last_attempt_reported=False)
    outcome = advance(before, error(next_action), NOW)
    assert (outcome.after.state, outcome.after.reason) == (before.state, before.reason)
    assert not outcome.changed
    assert outcome.after.last_attempt_reported


@pytest.mark.parametrize("state", [None, *LIVE])
def test_a_success_envelope_or_a_committed_error_succeeds_the_step(state) -> None:
    assert advance(at(state), EnvelopeArrived(ok=True, commit_state="committed"), NOW).after.state is State.SUCCEEDED
    committed_error = error("escalate", commit_state="committed", max_attempts_remaining=0)
    assert advance(at(state), committed_error, NOW).after.reason == "committed"


@pytest.mark.parametrize("state", sorted(TERMINAL))
@pytest.mark.parametrize(
    "event", [EnvelopeArrived(ok=True, commit_state="committed"), error("escalate"), EnvelopeRejected()]
)
def test_an_envelope_for_a_terminal_step_changes_nothing_and_says_step_closed(state, event) -> None:
    before = at(state)
    outcome = advance(before, event, NOW)
    assert outcome.after == before
    assert not outcome.changed
    assert outcome.directive_reason == "step_closed"


@pytest.mark.parametrize("next_action", ["correct_input", "wait_and_retry"])
def test_a_retrying_envelope_with_no_attempts_left_escalates_for_the_budget(next_action) -> None:
    by_remaining = advance(at(State.IN_PROGRESS), error(next_action, max_attempts_remaining=0), NOW)
    by_count = advance(at(State.IN_PROGRESS, attempts=3, max_attempts=3), error(next_action), NOW)
    for outcome in (by_remaining, by_count):
        assert (outcome.after.state, outcome.after.reason) == (State.ESCALATED, "attempt_budget_exhausted")


def test_the_agents_attempt_number_counts_towards_the_budget() -> None:
    outcome = advance(at(State.IN_PROGRESS, attempts=0), error("wait_and_retry", attempt=3), NOW)
    assert outcome.after.reason == "attempt_budget_exhausted"
    assert outcome.after.attempts == 3


def test_verify_operation_sets_trusted_after_and_deadline_from_occurred_at() -> None:
    occurred = NOW - timedelta(seconds=30)
    event = error("verify_operation", occurred_at=occurred, consistency_window_s=300, verification_deadline_s=3600)
    after = advance(at(State.IN_PROGRESS), event, NOW).after
    assert after.trusted_after == occurred + timedelta(seconds=300)
    assert after.deadline == occurred + timedelta(seconds=3600)
    assert after.due_at == after.deadline


def test_request_approval_binds_the_fingerprint_of_the_attempt_that_asked() -> None:
    after = advance(at(State.IN_PROGRESS, last_fingerprint=FP_A), error("request_approval"), NOW).after
    assert after.approval_fingerprint == FP_A
    assert after.expires_at == NOW + timedelta(seconds=86400)


def test_request_approval_without_any_attempt_binds_nothing() -> None:
    after = advance(Snapshot(), error("request_approval"), NOW).after
    assert after.approval_fingerprint == ""


@pytest.mark.parametrize("state", [None, *LIVE])
def test_a_rejected_envelope_escalates_a_live_step(state) -> None:
    outcome = advance(at(state), EnvelopeRejected(), NOW)
    assert (outcome.after.state, outcome.after.reason) == (State.ESCALATED, "malformed_envelope")


# --- the attempt gate --------------------------------------------------------------------------


def test_the_first_attempt_creates_the_step_in_progress() -> None:
    outcome = advance(Snapshot(), AttemptRequested(FP_A), NOW)
    assert outcome.granted
    assert (outcome.after.state, outcome.after.attempts) == (State.IN_PROGRESS, 1)
    assert not outcome.after.last_attempt_reported


def test_an_attempt_after_an_unreported_one_is_refused_and_the_step_verifies() -> None:
    before = at(State.IN_PROGRESS, last_attempt_reported=False)
    outcome = advance(before, AttemptRequested(FP_A), NOW)
    assert outcome.refusal == "verification_required"
    assert outcome.duplicate_prevented
    assert (outcome.after.state, outcome.after.reason) == (State.VERIFYING, "attempt_unreported")
    assert outcome.after.deadline is not None


@pytest.mark.parametrize(
    ("state", "reason", "code"),
    [
        (State.SUCCEEDED, "committed", "already_committed"),
        (State.CANCELLED, "rejected", "step_closed"),
        (State.FAILED, "aborted", "step_closed"),
        (State.VERIFYING, "verification_required", "verification_required"),
        (State.AWAITING_APPROVAL, "approval_pending", "approval_pending"),
        (State.ESCALATED, "escalation_requested", "escalated"),
        (State.ESCALATED, "attempt_budget_exhausted", "attempt_budget_exhausted"),
    ],
)
def test_the_gate_refuses_held_and_closed_steps_without_moving_them(state, reason, code) -> None:
    before = at(state, reason=reason)
    outcome = advance(before, AttemptRequested(FP_B), NOW)
    assert outcome.refusal == code
    assert not outcome.granted
    assert outcome.after == before
    assert outcome.duplicate_prevented == (code in {"already_committed", "verification_required"})


def test_waiting_retry_is_refused_before_not_before_with_retry_after() -> None:
    before = at(State.WAITING_RETRY, not_before=LATER)
    outcome = advance(before, AttemptRequested(FP_A), NOW)
    assert outcome.refusal == "retry_not_before"
    assert outcome.retry_after == LATER


def test_waiting_retry_past_not_before_is_granted_even_before_the_sweep() -> None:
    outcome = advance(at(State.WAITING_RETRY, not_before=NOW - timedelta(seconds=1)), AttemptRequested(FP_A), NOW)
    assert outcome.granted


def test_needs_input_refuses_the_identical_input_and_grants_a_changed_one() -> None:
    before = at(State.NEEDS_INPUT, last_fingerprint=FP_A)
    assert advance(before, AttemptRequested(FP_A), NOW).refusal == "identical_retry"
    changed = advance(before, AttemptRequested(FP_B), NOW)
    assert changed.granted
    assert changed.after.attempts == 2


def test_after_approval_only_the_approved_input_is_granted() -> None:
    approved = advance(at(State.AWAITING_APPROVAL, approval_fingerprint=FP_A), ReviewerActed("approve"), NOW).after
    assert (approved.state, approved.reason) == (State.RETRY_READY, "approved")
    mismatch = advance(approved, AttemptRequested(FP_B), NOW)
    assert mismatch.refusal == "approval_mismatch"
    assert (mismatch.after.state, mismatch.after.reason) == (State.AWAITING_APPROVAL, "approval_mismatch")
    # The input that asked again is the one a reviewer approves next.
    assert mismatch.after.approval_fingerprint == FP_B
    granted = advance(approved, AttemptRequested(FP_A), NOW)
    assert granted.granted
    assert granted.after.approval_fingerprint == ""


def test_an_approval_of_an_edited_input_binds_its_fingerprint_only() -> None:
    held = at(State.AWAITING_APPROVAL, approval_fingerprint=FP_A)
    approved = advance(held, ReviewerActed("approve", fingerprint=FP_B), NOW).after
    assert (approved.state, approved.approval_fingerprint) == (State.RETRY_READY, FP_B)
    assert advance(approved, AttemptRequested(FP_A), NOW).refusal == "approval_mismatch"
    assert advance(approved, AttemptRequested(FP_B), NOW).granted
    # Any other act ignores a fingerprint: only an approval binds.
    rejected = advance(held, ReviewerActed("reject", fingerprint=FP_B), NOW).after
    assert (rejected.state, rejected.approval_fingerprint) == (State.CANCELLED, "")


APPROVED = at(
    State.RETRY_READY,
    reason="approved",
    approval_fingerprint=FP_A,
    last_fingerprint=FP_A,
    approved_at=NOW - timedelta(minutes=1),
    approval_lapses_at=NOW + timedelta(days=1),
)

# Every way an agent (or a timer, or a report) can move an approved step before it runs anything,
# and what brings the step back to where the gate would grant again.
AGENT_MOVES = {
    "correct_input": [error("correct_input")],
    "wait_and_retry then the timer": [error("wait_and_retry", not_before=NOW), TimerFired("retry_due")],
    "wait_and_retry, not_before past": [error("wait_and_retry", not_before=NOW)],
    "verify_operation then not_found": [
        error("verify_operation", occurred_at=NOW - timedelta(hours=1)),
        VerificationReported("not_found"),
    ],
    "request_approval then approve": [error("request_approval", max_attempts_remaining=0), ReviewerActed("approve")],
    "escalate then permit_retry": [error("escalate", max_attempts_remaining=0), ReviewerActed("permit_retry")],
    "a rejected envelope then permit_retry": [EnvelopeRejected(), ReviewerActed("permit_retry")],
}


@pytest.mark.parametrize("moves", AGENT_MOVES.values(), ids=AGENT_MOVES.keys())
def test_an_approval_binds_through_every_move_until_an_attempt_uses_it(moves) -> None:
    snapshot = APPROVED
    for event in moves:
        snapshot = advance(snapshot, event, NOW).after
        assert snapshot.approval_fingerprint == FP_A, event
    assert snapshot.state in (State.NEEDS_INPUT, State.WAITING_RETRY, State.RETRY_READY)
    other = advance(snapshot, AttemptRequested(FP_B), NOW)
    assert other.refusal == "approval_mismatch"
    assert (other.after.state, other.after.reason) == (State.AWAITING_APPROVAL, "approval_mismatch")
    assert not other.granted


def test_after_correct_input_the_approved_input_is_still_an_identical_retry() -> None:
    needs_input = advance(APPROVED, error("correct_input"), NOW).after
    assert advance(needs_input, AttemptRequested(FP_A), NOW).refusal == "identical_retry"


def test_request_approval_keeps_an_unused_approval_as_the_input_under_review() -> None:
    bound_b = replace(APPROVED, approval_fingerprint=FP_B)
    held = advance(bound_b, error("request_approval", max_attempts_remaining=0), NOW).after
    assert held.approval_fingerprint == FP_B
    assert advance(advance(held, ReviewerActed("approve"), NOW).after, AttemptRequested(FP_B), NOW).granted


@pytest.mark.parametrize(
    "event", [EnvelopeArrived(ok=True, commit_state="committed"), error("abort", max_attempts_remaining=0)]
)
def test_a_closed_step_keeps_no_binding(event) -> None:
    after = advance(APPROVED, event, NOW).after
    assert (after.approval_fingerprint, after.approved_at, after.approval_lapses_at) == ("", None, None)
    under_review = advance(replace(UNDER_REVIEW, state=State.NEEDS_INPUT), event, NOW).after
    assert (under_review.state in TERMINAL, under_review.approval_fingerprint, under_review.review_started_at) == (
        True,
        "",
        None,
    )


# --- under review is not approved (contract §3 v1.2) -----------------------------------------

REVIEW_START = NOW - timedelta(hours=1)
# Asked for approval an hour ago, one approval of two given, then a malformed envelope.
UNDER_REVIEW = at(
    State.ESCALATED, reason="malformed_envelope", approval_fingerprint=FP_A, review_started_at=REVIEW_START
)


def test_request_approval_puts_the_binding_under_review_from_now() -> None:
    after = advance(at(State.IN_PROGRESS, last_fingerprint=FP_A), error("request_approval"), NOW).after
    assert (after.review_started_at, after.approved_at, after.approval_lapses_at) == (NOW, None, None)
    assert after.under_review
    # A new request for an approved binding is a new review: the approval releases nothing now.
    again = advance(APPROVED, error("request_approval", max_attempts_remaining=0), NOW).after
    assert (again.state, again.approval_fingerprint, again.review_started_at, again.approved_at) == (
        State.AWAITING_APPROVAL,
        FP_A,
        NOW,
        None,
    )


def test_the_approval_that_completes_the_quorum_approves_the_binding_until_its_lapse() -> None:
    held = advance(at(State.IN_PROGRESS, last_fingerprint=FP_A), error("request_approval"), NOW).after
    approved = advance(held, ReviewerActed("approve", approval_ttl_s=600), LATER).after
    assert (approved.state, approved.approval_fingerprint) == (State.RETRY_READY, FP_A)
    assert (approved.review_started_at, approved.approved_at) == (None, LATER)
    assert approved.approval_lapses_at == LATER + timedelta(seconds=600)
    assert approved.due_at == approved.approval_lapses_at
    assert not approved.under_review


def test_a_malformed_envelope_keeps_the_binding_under_review() -> None:
    held = at(State.AWAITING_APPROVAL, approval_fingerprint=FP_A, review_started_at=REVIEW_START)
    after = advance(held, EnvelopeRejected(), NOW).after
    assert (after.state, after.reason) == (State.ESCALATED, "malformed_envelope")
    assert (after.approval_fingerprint, after.review_started_at, after.approved_at) == (FP_A, REVIEW_START, None)


@pytest.mark.parametrize("state", [State.ESCALATED, State.VERIFYING])
@pytest.mark.parametrize("fingerprint", [FP_A, ""])
def test_a_permitted_retry_of_an_input_under_review_goes_back_to_its_reviewers(state, fingerprint) -> None:
    before = replace(UNDER_REVIEW, state=state, approval_fingerprint=fingerprint)
    outcome = advance(before, ReviewerActed("permit_retry", approval_ttl_s=600), NOW)
    after = outcome.after
    assert (after.state, after.reason) == (State.AWAITING_APPROVAL, "approval_pending")
    assert outcome.changed
    # The same review: the approvals given since it started still count; a fresh expiry.
    assert (after.approval_fingerprint, after.review_started_at) == (fingerprint, REVIEW_START)
    assert after.expires_at == after.due_at == NOW + timedelta(seconds=600)
    assert advance(after, AttemptRequested(FP_A), NOW).refusal == "approval_pending"


def test_resolving_or_cancelling_a_step_under_review_closes_it() -> None:
    # "resolve" releases no write: Mark committed closes the step, as Cancel step does.
    committed = advance(UNDER_REVIEW, ReviewerActed("mark_committed"), NOW).after
    assert (committed.state, committed.reason, committed.review_started_at) == (
        State.SUCCEEDED,
        "resolved_committed",
        None,
    )
    cancelled = advance(UNDER_REVIEW, ReviewerActed("cancel"), NOW).after
    assert (cancelled.state, cancelled.approval_fingerprint) == (State.CANCELLED, "")


def test_a_permitted_retry_of_an_approved_binding_is_a_retry() -> None:
    escalated = advance(APPROVED, EnvelopeRejected(), NOW).after
    after = advance(escalated, ReviewerActed("permit_retry"), NOW).after
    assert (after.state, after.reason) == (State.RETRY_READY, "retry_permitted")
    assert (after.approved_at, after.approval_lapses_at) == (APPROVED.approved_at, APPROVED.approval_lapses_at)
    assert advance(after, AttemptRequested(FP_A), NOW).granted


@pytest.mark.parametrize("state", AGENT_SIDE[1:])
def test_the_gate_sends_an_input_under_review_back_to_review_wherever_the_agent_holds_it(state) -> None:
    before = replace(UNDER_REVIEW, state=state, reason=sorted(REASONS[state])[0], not_before=NOW)
    same = advance(before, AttemptRequested(FP_A, approval_ttl_s=600), NOW)
    assert (same.refusal, same.granted) == ("approval_pending", False)
    assert (same.after.state, same.after.reason) == (State.AWAITING_APPROVAL, "approval_pending")
    assert (same.after.review_started_at, same.after.expires_at) == (REVIEW_START, NOW + timedelta(seconds=600))
    other = advance(before, AttemptRequested(FP_B), NOW)
    assert (other.refusal, other.after.reason) == ("approval_mismatch", "approval_mismatch")
    # Another input is a new review, counted from now.
    assert (other.after.approval_fingerprint, other.after.review_started_at) == (FP_B, NOW)
    # Nothing bound (no fingerprinted attempt asked), still under review: nothing is granted.
    unbound = advance(replace(before, approval_fingerprint=""), AttemptRequested(FP_B), NOW)
    assert (unbound.refusal, unbound.after.state) == ("approval_pending", State.AWAITING_APPROVAL)


def test_a_binding_with_no_standing_is_never_taken_for_approved() -> None:
    legacy = at(State.RETRY_READY, approval_fingerprint=FP_A)
    assert legacy.under_review
    outcome = advance(legacy, AttemptRequested(FP_A), NOW)
    assert (outcome.refusal, outcome.after.review_started_at) == ("approval_pending", NOW)


def test_the_reported_bypass_ends_in_awaiting_approval_not_a_grant() -> None:
    # Issue 23: one approval of two, a malformed envelope, Permit retry, the held input asked.
    held = advance(at(State.IN_PROGRESS, last_fingerprint=FP_A), error("request_approval"), REVIEW_START).after
    escalated = advance(held, EnvelopeRejected(), NOW).after
    permitted = advance(escalated, ReviewerActed("permit_retry"), NOW).after
    outcome = advance(permitted, AttemptRequested(FP_A), NOW)
    assert not outcome.granted
    assert (outcome.after.state, outcome.refusal) == (State.AWAITING_APPROVAL, "approval_pending")


# --- an approval's lapse ---------------------------------------------------------------------


@pytest.mark.parametrize("state", [s for s in LIVE if s is not State.AWAITING_APPROVAL])
def test_an_unused_approval_lapses_in_whatever_state_the_step_waits(state) -> None:
    before = replace(APPROVED, state=state, reason=sorted(REASONS[state])[0], approval_lapses_at=NOW)
    assert before.due_at == NOW or (before.state_due_at or NOW) < NOW
    assert before.due_timer(NOW) == lifecycle.APPROVAL_LAPSE
    outcome = advance(before, TimerFired(lifecycle.APPROVAL_LAPSE), NOW)
    assert (outcome.after.state, outcome.after.reason) == (State.CANCELLED, "approval_expired")
    assert outcome.effects == ("approval_expired",)
    assert (outcome.after.approval_fingerprint, outcome.after.approved_at, outcome.after.due_at) == ("", None, None)
    # Fired once: again, it is a closed step's stale timer.
    assert advance(outcome.after, TimerFired(lifecycle.APPROVAL_LAPSE), NOW).ignored


@pytest.mark.parametrize("state", [State.RETRY_READY, State.NEEDS_INPUT, State.WAITING_RETRY])
def test_the_gate_applies_a_lapse_the_sweep_has_not_fired_yet(state) -> None:
    before = replace(APPROVED, state=state, reason=sorted(REASONS[state])[0], approval_lapses_at=NOW)
    outcome = advance(before, AttemptRequested(FP_A), NOW)
    assert (outcome.granted, outcome.refusal) == (False, "step_closed")
    assert (outcome.after.state, outcome.after.reason, outcome.effects) == (
        State.CANCELLED,
        "approval_expired",
        ("approval_expired",),
    )
    # A second before its lapse, the gate answers as it would have (the approved input granted,
    # or after correct_input refused as an identical retry).
    earlier = advance(before, AttemptRequested(FP_A), NOW - timedelta(seconds=1))
    assert earlier.granted or earlier.refusal == "identical_retry"


def test_a_lapse_not_due_or_without_an_approval_does_nothing() -> None:
    assert advance(APPROVED, TimerFired(lifecycle.APPROVAL_LAPSE), NOW).ignored
    assert advance(UNDER_REVIEW, TimerFired(lifecycle.APPROVAL_LAPSE), NOW).ignored
    assert APPROVED.due_timer(NOW) is None


def test_a_retry_window_and_an_approval_lapse_are_both_timed() -> None:
    waiting = advance(APPROVED, error("wait_and_retry", not_before=NOW + timedelta(minutes=5)), NOW).after
    assert waiting.due_at == NOW + timedelta(minutes=5)  # the sooner of the two
    at_window = NOW + timedelta(minutes=5)
    assert waiting.due_timer(at_window) == "retry_due"
    ready = advance(waiting, TimerFired("retry_due"), at_window).after
    assert (ready.state, ready.due_at) == (State.RETRY_READY, APPROVED.approval_lapses_at)
    # Both due at once: the lapse wins (an expired approval cancels; expiry never guesses a write).
    both = replace(waiting, approval_lapses_at=at_window)
    assert both.due_timer(at_window) == lifecycle.APPROVAL_LAPSE
    # A granted attempt uses the approval: nothing left to lapse.
    granted = advance(ready, AttemptRequested(FP_A), at_window).after
    assert (granted.approved_at, granted.approval_lapses_at, granted.due_at) == (None, None, None)


@pytest.mark.parametrize("state", [State.RETRY_READY, State.NEEDS_INPUT, State.WAITING_RETRY])
def test_a_halted_tool_refuses_attempts_until_it_resumes(state) -> None:
    before = at(state, halted_until=LATER, last_fingerprint=FP_B, not_before=NOW - timedelta(seconds=5))
    outcome = advance(before, AttemptRequested(FP_A), NOW)
    assert outcome.refusal == "tool_halted"
    assert outcome.retry_after == LATER
    assert advance(replace(before, halted_until=None), AttemptRequested(FP_A), NOW).granted


# --- verification ------------------------------------------------------------------------------


def test_verification_committed_succeeds_and_counts_as_resolved() -> None:
    outcome = advance(at(State.VERIFYING), VerificationReported("committed"), NOW)
    assert (outcome.after.state, outcome.after.reason) == (State.SUCCEEDED, "verified_committed")
    assert "resolved_by_verification" in outcome.effects


def test_not_found_inside_the_window_keeps_verifying_and_says_when_to_look_again() -> None:
    before = at(State.VERIFYING, trusted_after=LATER, deadline=LATER + timedelta(hours=1))
    outcome = advance(before, VerificationReported("not_found"), NOW)
    assert outcome.after == before
    assert outcome.directive_not_before == LATER


def test_not_found_after_the_window_permits_a_retry_on_the_same_ref() -> None:
    before = at(State.VERIFYING, trusted_after=NOW, deadline=LATER)
    outcome = advance(before, VerificationReported("not_found"), NOW)
    assert (outcome.after.state, outcome.after.reason) == (State.RETRY_READY, "verified_not_found")


def test_verification_unavailable_escalates() -> None:
    outcome = advance(at(State.VERIFYING), VerificationReported("unavailable"), NOW)
    assert (outcome.after.state, outcome.after.reason) == (State.ESCALATED, "verification_unavailable")


@pytest.mark.parametrize("state", [s for s in LIVE if s is not State.VERIFYING])
@pytest.mark.parametrize("result", ["not_found", "unavailable"])
def test_a_lookup_outside_verification_changes_nothing(state, result) -> None:
    before = at(state)
    assert advance(before, VerificationReported(result), NOW).after == before


# --- timers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "timer", "field", "target"),
    [
        (State.WAITING_RETRY, "retry_due", "not_before", (State.RETRY_READY, "retry_window_open")),
        (State.VERIFYING, "verification_deadline", "deadline", (State.ESCALATED, "verification_timeout")),
        (State.AWAITING_APPROVAL, "approval_expired", "expires_at", (State.CANCELLED, "approval_expired")),
    ],
)
def test_a_due_timer_moves_its_state_once(state, timer, field, target) -> None:
    before = at(state, **{field: NOW})
    first = advance(before, TimerFired(timer), NOW)
    assert (first.after.state, first.after.reason) == target
    again = advance(first.after, TimerFired(timer), NOW)
    assert not again.changed


@pytest.mark.parametrize("state", [None, *State])
@pytest.mark.parametrize("timer", ["retry_due", "verification_deadline", "approval_expired"])
def test_a_timer_that_is_not_due_or_not_this_states_does_nothing(state, timer) -> None:
    before = at(state, not_before=LATER, deadline=LATER, expires_at=LATER)
    assert not advance(before, TimerFired(timer), NOW).changed


def test_nothing_held_turns_into_a_retry_by_time_alone_except_waiting_retry() -> None:
    for state in HELD:
        for timer in ("retry_due", "verification_deadline", "approval_expired"):
            outcome = advance(at(state, not_before=NOW, deadline=NOW, expires_at=NOW), TimerFired(timer), NOW)
            if outcome.after.state is State.RETRY_READY:
                assert state is State.WAITING_RETRY


# --- reviewers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "action", "target"),
    [
        (State.AWAITING_APPROVAL, "approve", (State.RETRY_READY, "approved")),
        (State.AWAITING_APPROVAL, "reject", (State.CANCELLED, "rejected")),
        (State.VERIFYING, "mark_committed", (State.SUCCEEDED, "resolved_committed")),
        (State.VERIFYING, "permit_retry", (State.RETRY_READY, "retry_permitted")),
        (State.VERIFYING, "cancel", (State.CANCELLED, "cancelled_by_reviewer")),
        (State.ESCALATED, "mark_committed", (State.SUCCEEDED, "resolved_committed")),
        (State.ESCALATED, "permit_retry", (State.RETRY_READY, "retry_permitted")),
        (State.ESCALATED, "cancel", (State.CANCELLED, "cancelled_by_reviewer")),
    ],
)
def test_reviewer_acts_move_held_steps(state, action, target) -> None:
    outcome = advance(at(state), ReviewerActed(action), NOW)
    assert (outcome.after.state, outcome.after.reason) == target


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("action", ["approve", "reject", "mark_committed", "permit_retry", "cancel"])
def test_a_reviewer_act_the_state_does_not_allow_changes_nothing(state, action) -> None:
    if action in lifecycle.REVIEWER_ACTS.get(state, {}):
        return
    before = at(state)
    outcome = advance(before, ReviewerActed(action), NOW)
    assert outcome.after == before
    assert not outcome.changed


# --- the table and invariants, over random event sequences -------------------------------------


def test_every_reason_belongs_to_exactly_one_state() -> None:
    # But one (contract §12, v1.2): an expired request is cancelled, or escalated by a tool with
    # on_approval_expiry: escalate; both say approval_expired.
    shared = {"approval_expired": {State.CANCELLED, State.ESCALATED}}
    seen: dict[str, set[State]] = {}
    for state, reasons in REASONS.items():
        for reason in reasons:
            seen.setdefault(reason, set()).add(state)
    assert {reason: states for reason, states in seen.items() if len(states) > 1} == shared


events = st.one_of(
    st.builds(
        EnvelopeArrived,
        ok=st.booleans(),
        commit_state=st.sampled_from(["not_committed", "committed", "unknown"]),
        next_action=st.sampled_from(sorted(ENVELOPE_TARGETS)),
        max_attempts_remaining=st.integers(0, 3),
        not_before=st.just(NOW + timedelta(minutes=1)),
        attempt=st.none() | st.integers(1, 6),
    ),
    st.just(EnvelopeRejected()),
    st.builds(AttemptRequested, fingerprint=st.sampled_from([FP_A, FP_B])),
    st.builds(VerificationReported, outcome=st.sampled_from(["committed", "not_found", "unavailable"])),
    st.builds(
        TimerFired, timer=st.sampled_from(["retry_due", "verification_deadline", "approval_expired", "approval_lapsed"])
    ),
    st.builds(ReviewerActed, action=st.sampled_from(["approve", "reject", "mark_committed", "permit_retry", "cancel"])),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(events, st.integers(0, 7200)), min_size=1, max_size=25),
    st.integers(1, 4),
    st.sampled_from([Snapshot(), APPROVED, UNDER_REVIEW]),  # a new step, an approved one, one under review
)
def test_random_event_sequences_keep_every_invariant(sequence, max_attempts, start) -> None:
    snapshot = replace(start, max_attempts=max_attempts)
    now = NOW
    budget_escalations = 0
    for event, seconds in sequence:
        now = now + timedelta(seconds=seconds)
        if snapshot.state is None and not isinstance(event, (EnvelopeArrived, EnvelopeRejected, AttemptRequested)):
            continue  # the services answer 404: only these events may create a step
        outcome = advance(snapshot, event, now)
        after = outcome.after
        assert after.state is not None
        if snapshot.state is None:
            assert after.state in INITIAL
        elif after.state != snapshot.state:
            assert after.state in EDGES[snapshot.state], (snapshot.state, after.state, event)
        if snapshot.state in TERMINAL:
            assert after == snapshot
        assert after.attempts >= snapshot.attempts
        assert after.reason in REASONS[after.state]
        assert not (outcome.granted and outcome.refusal)
        if outcome.granted:
            assert after.attempts == snapshot.attempts + 1
            assert after.state is State.IN_PROGRESS
            # An approval binds its input: nothing else is ever granted while it is unused.
            assert snapshot.approval_fingerprint in ("", event.fingerprint)
            assert after.approval_fingerprint == ""
            # ... and nothing under review is ever granted (contract §3 v1.2).
            assert not snapshot.under_review
        assert after.review_started_at is None or after.approved_at is None
        assert (after.approved_at is None) == (after.approval_lapses_at is None)
        if after.approved_at is not None and after.approved_at != snapshot.approved_at:
            # Only the act the services feed once the quorum is complete approves.
            assert isinstance(event, ReviewerActed) and event.action == "approve"
        if after.approval_fingerprint != snapshot.approval_fingerprint:
            # Only a grant uses a binding up, only a closed step drops it, and only a new
            # request for approval names another input.
            assert outcome.granted or after.state in TERMINAL or after.state is State.AWAITING_APPROVAL
            if after.state is State.AWAITING_APPROVAL and snapshot.approval_fingerprint:
                assert outcome.refusal == "approval_mismatch"
        if after.state in HELD and after.state in lifecycle.TIMER_OF:
            assert after.due_at is not None
        if outcome.changed and after.reason == "attempt_budget_exhausted":
            budget_escalations += 1
        if after.state is State.RETRY_READY and snapshot.state is not State.RETRY_READY:
            # Only a timer on waiting_retry, a verification, or a human turns a step into a retry.
            assert isinstance(event, (TimerFired, VerificationReported, ReviewerActed))
            if isinstance(event, TimerFired):
                assert snapshot.state is State.WAITING_RETRY
        snapshot = after
    assert budget_escalations <= len(sequence)


failures = st.lists(
    st.tuples(
        st.sampled_from(["correct_input", "wait_and_retry"]),
        st.integers(0, 4),  # max_attempts_remaining the tool claims
        st.booleans(),  # whether the agent asks the gate first
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(failures, st.integers(1, 5))
def test_a_failing_step_escalates_for_its_budget_exactly_once(sequence, max_attempts) -> None:
    snapshot = Snapshot(max_attempts=max_attempts)
    now = NOW
    escalations = 0
    for n, (next_action, remaining, ask_first) in enumerate(sequence):
        now += timedelta(minutes=5)
        if ask_first or snapshot.state is None:
            grant = advance(snapshot, AttemptRequested(fingerprint=f"{n:064x}"), now)
            snapshot = grant.after
            if grant.refusal:
                assert grant.refusal in {"attempt_budget_exhausted", "verification_required", "tool_halted"} or (
                    snapshot.state is State.ESCALATED
                )
        outcome = advance(snapshot, error(next_action, max_attempts_remaining=remaining, not_before=now), now)
        if outcome.changed and outcome.after.reason == "attempt_budget_exhausted":
            escalations += 1
            assert remaining == 0 or outcome.after.attempts >= max_attempts
        snapshot = outcome.after
        if snapshot.reason == "attempt_budget_exhausted":
            assert advance(snapshot, AttemptRequested(FP_A), now).refusal == "attempt_budget_exhausted"
    exhausted = any(r == 0 for _, r, _ in sequence) or snapshot.attempts >= max_attempts
    assert escalations == (1 if snapshot.reason == "attempt_budget_exhausted" else 0)
    if snapshot.reason != "attempt_budget_exhausted":
        assert not exhausted or snapshot.state is State.ESCALATED
