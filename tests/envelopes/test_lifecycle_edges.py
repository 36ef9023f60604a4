"""`states.EDGES` is exactly the set of edges `advance()` takes: a brute force over every
state, every reason, the snapshot fields each rule reads, and every kind of event.

Both directions matter: an edge the machine takes that the table lacks is an escape the
property tests would flag as a bug only if they happen to find it, and an edge the table allows
that the machine never takes would let a future escape (an agent talking its way out of a hold)
pass those property tests unnoticed."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from envelopes.lifecycle import (
    AttemptRequested,
    EnvelopeArrived,
    EnvelopeRejected,
    Event,
    ReviewerActed,
    RuleDenied,
    Snapshot,
    TimerFired,
    VerificationReported,
    advance,
)
from envelopes.states import EDGES, INITIAL, REASONS, State

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FP_A = "a" * 64
FP_B = "b" * 64
NEXT_ACTIONS = ("correct_input", "wait_and_retry", "verify_operation", "request_approval", "escalate", "abort", None)


def snapshots() -> Iterator[Snapshot]:
    """Every state and reason, with each field a rule reads on either side of its threshold."""
    for state in [None, *State]:
        for reason, attempts, reported, (approval, standing), timing, halted in itertools.product(
            sorted(REASONS[state]) if state else [""],
            (0, 1, 3),  # none yet, some, the budget (max_attempts=3)
            (True, False),  # the last granted attempt reported back
            # No binding; one (the events ask with FP_A and FP_B) or none bound, under review or
            # approved (its lapse on the timers' side of now).
            itertools.product(("", FP_A), ("none", "under_review", "approved")),
            (None, timedelta(hours=-1), timedelta(hours=1)),  # timers absent, due, not due
            (None, timedelta(hours=1)),  # the tool's circuit closed, open
        ):
            if approval and standing == "none":
                continue  # a binding always has a standing (lifecycle.Snapshot)
            at = None if timing is None else NOW + timing
            approved = standing == "approved"
            yield Snapshot(
                review_started_at=NOW - timedelta(hours=2) if standing == "under_review" else None,
                approved_at=NOW - timedelta(hours=2) if approved else None,
                approval_lapses_at=(at or NOW + timedelta(hours=1)) if approved else None,
                state=state,
                reason=reason,
                attempts=attempts,
                max_attempts=3,
                last_fingerprint=FP_A if attempts else "",
                last_attempt_reported=reported,
                approval_fingerprint=approval,
                not_before=at,
                trusted_after=at,
                deadline=at,
                expires_at=at,
                halted_until=None if halted is None else NOW + halted,
            )


def events() -> Iterator[Event]:
    """Every kind of event with every value its rules branch on."""
    for attempt in (None, 5):
        yield EnvelopeArrived(ok=True, commit_state="committed", attempt=attempt)
        for commit_state, next_action, remaining in itertools.product(
            ("not_committed", "committed", "unknown"), NEXT_ACTIONS, (None, 0, 2)
        ):
            yield EnvelopeArrived(
                ok=False,
                commit_state=commit_state,
                next_action=next_action,
                max_attempts_remaining=remaining,
                not_before=NOW + timedelta(minutes=1),
                attempt=attempt,
            )
    yield EnvelopeRejected()
    yield from (
        AttemptRequested(fingerprint, rule_effect=effect)
        for fingerprint in (FP_A, FP_B)
        for effect in ("", "deny", "hold")  # what the team's rules said of it (§11)
    )
    yield RuleDenied()
    yield from (VerificationReported(outcome) for outcome in ("committed", "not_found", "unavailable"))
    yield from (
        TimerFired(timer) for timer in ("retry_due", "verification_deadline", "approval_expired", "approval_lapsed")
    )
    yield from (ReviewerActed(act) for act in ("approve", "reject", "mark_committed", "permit_retry", "cancel"))
    yield from (ReviewerActed("approve", reason=reason) for reason in ("approved_by_rule", "approved_by_grant"))


def reached() -> tuple[dict[State, set[State]], set[State]]:
    every_event = list(events())
    edges: dict[State, set[State]] = {state: set() for state in State}
    initial: set[State] = set()
    for before in snapshots():
        for event in every_event:
            after = advance(before, event, NOW).after.state
            assert after is not None or before.state is None
            if before.state is None:
                if after is not None:
                    initial.add(after)
            elif after is not before.state:
                edges[before.state].add(after)  # type: ignore[arg-type]
    return edges, initial


def test_the_edges_advance_takes_are_exactly_the_table() -> None:
    edges, initial = reached()
    for state in State:
        assert edges[state] - EDGES[state] == set(), f"{state} takes edges the table lacks"
        assert EDGES[state] - edges[state] == set(), f"{state} is allowed edges it never takes"
    assert initial == set(INITIAL)


def test_a_hold_is_left_only_by_a_release() -> None:
    # Spelled out, so that widening the table is a visible change here too. A permitted retry of
    # an input only under review goes back to awaiting_approval (contract §3 v1.2); an enforced
    # deny rule matching the input under review sends it back to the agent (§11).
    releases = {State.RETRY_READY, State.SUCCEEDED, State.CANCELLED, State.ESCALATED}
    assert EDGES[State.VERIFYING] == releases | {State.AWAITING_APPROVAL}
    assert EDGES[State.AWAITING_APPROVAL] == releases | {State.NEEDS_INPUT}
    assert EDGES[State.ESCALATED] == (releases | {State.AWAITING_APPROVAL}) - {State.ESCALATED}


def test_only_a_lapsed_approval_cancels_a_step_the_agent_holds_unheld() -> None:
    # in_progress and retry_ready are not held, so no reviewer cancels them: their approval's
    # lapse does, and nothing else.
    every_event = list(events())
    for before in snapshots():
        if before.state not in (State.IN_PROGRESS, State.RETRY_READY):
            continue
        for event in every_event:
            if advance(before, event, NOW).after.state is State.CANCELLED:
                # The sweep's lapse, or the gate's when it comes first.
                assert event == TimerFired("approval_lapsed") or isinstance(event, AttemptRequested)
                assert before.approval_lapses_at is not None and before.approval_lapses_at <= NOW
