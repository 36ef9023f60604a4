"""The step state machine's data (contract §3): the states, their reasons and directive actions,
which state may follow which, the reviewers' acts and the timers. No Django; `lifecycle` holds the
functions that read these tables."""

from __future__ import annotations

import enum


class State(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    NEEDS_INPUT = "needs_input"
    WAITING_RETRY = "waiting_retry"
    RETRY_READY = "retry_ready"
    VERIFYING = "verifying"
    AWAITING_APPROVAL = "awaiting_approval"
    ESCALATED = "escalated"
    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"
    FAILED = "failed"


HELD = frozenset(
    {
        State.NEEDS_INPUT,
        State.WAITING_RETRY,
        State.VERIFYING,
        State.AWAITING_APPROVAL,
        State.ESCALATED,
    }
)
TERMINAL = frozenset({State.SUCCEEDED, State.CANCELLED, State.FAILED})

ACTION = {
    State.IN_PROGRESS: "proceed",
    State.NEEDS_INPUT: "fix_input",
    State.WAITING_RETRY: "wait",
    State.RETRY_READY: "proceed",
    State.VERIFYING: "verify",
    State.AWAITING_APPROVAL: "hold",
    State.ESCALATED: "hold",
    State.SUCCEEDED: "stop",
    State.CANCELLED: "stop",
    State.FAILED: "stop",
}

# Why a step is in its state (contract §4), by state.
REASONS: dict[State, frozenset[str]] = {
    State.IN_PROGRESS: frozenset({"attempt_granted"}),
    State.NEEDS_INPUT: frozenset({"input_fix_required", "denied_by_rule"}),
    State.WAITING_RETRY: frozenset({"retry_not_before"}),
    State.RETRY_READY: frozenset(
        {
            "retry_window_open",
            "approved",
            "verified_not_found",
            "retry_permitted",
            "approved_by_rule",
            "approved_by_grant",
        }
    ),
    State.VERIFYING: frozenset({"verification_required", "attempt_unreported"}),
    State.AWAITING_APPROVAL: frozenset({"approval_pending", "approval_mismatch", "approval_required_by_rule"}),
    State.ESCALATED: frozenset(
        {
            "escalation_requested",
            "attempt_budget_exhausted",
            "verification_timeout",
            "verification_unavailable",
            "malformed_envelope",
            "approval_expired",  # on_approval_expiry: escalate (v1.2, §12)
        }
    ),
    State.SUCCEEDED: frozenset({"committed", "verified_committed", "resolved_committed"}),
    State.CANCELLED: frozenset({"rejected", "approval_expired", "cancelled_by_reviewer"}),
    State.FAILED: frozenset({"aborted"}),
}

# Every edge the machine takes, and no other: a brute force over states x events reaches
# exactly these (tests/envelopes/test_lifecycle_edges.py), and the property tests check that no
# event sequence leaves them. A new edge is a design change: add it here, on purpose.
_AGENT_MOVES = frozenset(
    {
        # an envelope's next_action, the attempt budget, a malformed envelope, a success
        State.NEEDS_INPUT,
        State.WAITING_RETRY,
        State.VERIFYING,
        State.AWAITING_APPROVAL,
        State.ESCALATED,
        State.SUCCEEDED,
        State.FAILED,
    }
)
# Held by a human or a lookup: an agent's error envelope moves nothing, so these leave only by
# a reviewer, a verification report, a timer, a success or a malformed envelope.
_RELEASES = frozenset({State.RETRY_READY, State.SUCCEEDED, State.CANCELLED, State.ESCALATED})
EDGES: dict[State, frozenset[State]] = {
    # A reviewer never cancels it (only a held step can be cancelled, and in_progress is not
    # held); the lapse of an approved binding does (a grant uses the binding up, so only a
    # snapshot no event sequence makes holds one here).
    State.IN_PROGRESS: (_AGENT_MOVES | {State.CANCELLED}) - {State.IN_PROGRESS},
    # A grant (changed input), an agent's move, or a reviewer's cancel (cancel-all).
    State.NEEDS_INPUT: (_AGENT_MOVES | {State.IN_PROGRESS, State.CANCELLED}) - {State.NEEDS_INPUT},
    # The same, and its timer.
    State.WAITING_RETRY: (_AGENT_MOVES | {State.IN_PROGRESS, State.CANCELLED, State.RETRY_READY})
    - {State.WAITING_RETRY},
    # Not held, so never cancelled by a reviewer; cancelled by its approval's lapse.
    State.RETRY_READY: (_AGENT_MOVES | {State.IN_PROGRESS, State.CANCELLED}) - {State.RETRY_READY},
    # A permitted retry of an input only under review goes back to its reviewers.
    State.VERIFYING: _RELEASES | {State.AWAITING_APPROVAL},
    # A deny rule matching the input under review sends it back to the agent (§11).
    State.AWAITING_APPROVAL: _RELEASES | {State.NEEDS_INPUT},
    State.ESCALATED: (_RELEASES | {State.AWAITING_APPROVAL}) - {State.ESCALATED},
    State.SUCCEEDED: frozenset(),
    State.CANCELLED: frozenset(),
    State.FAILED: frozenset(),
}
# A step that does not exist yet becomes one through its first envelope or attempt.
INITIAL: frozenset[State] = _AGENT_MOVES | {State.IN_PROGRESS}

# Attempt-gate refusals that count as a duplicate write prevented (contract §4).
DUPLICATE_PREVENTING = frozenset({"verification_required", "already_committed"})

# The envelope's next_action -> (state, reason).
NEXT_ACTION_TARGET = {
    "correct_input": (State.NEEDS_INPUT, "input_fix_required"),
    "wait_and_retry": (State.WAITING_RETRY, "retry_not_before"),
    "verify_operation": (State.VERIFYING, "verification_required"),
    "request_approval": (State.AWAITING_APPROVAL, "approval_pending"),
    "escalate": (State.ESCALATED, "escalation_requested"),
    "abort": (State.FAILED, "aborted"),
}
RETRYING_ACTIONS = frozenset({"correct_input", "wait_and_retry"})
# States a human (or a verification) must release: an agent's error envelope is stored and
# shown there but moves nothing, so an agent cannot talk its way out of a hold.
HUMAN_HELD = frozenset({State.VERIFYING, State.AWAITING_APPROVAL, State.ESCALATED})

# Reviewer acts (contract §3 and §7): state -> action -> (state, reason). A `permit_retry` of a
# step whose binding is only under review goes to awaiting_approval (approval_pending) instead
# (see EDGES): `_on_reviewer`.
REVIEWER_ACTS: dict[State, dict[str, tuple[State, str]]] = {
    State.AWAITING_APPROVAL: {
        "approve": (State.RETRY_READY, "approved"),
        "reject": (State.CANCELLED, "rejected"),
        "cancel": (State.CANCELLED, "cancelled_by_reviewer"),
    },
    State.VERIFYING: {
        "mark_committed": (State.SUCCEEDED, "resolved_committed"),
        "permit_retry": (State.RETRY_READY, "retry_permitted"),
        "cancel": (State.CANCELLED, "cancelled_by_reviewer"),
    },
    State.ESCALATED: {
        "mark_committed": (State.SUCCEEDED, "resolved_committed"),
        "permit_retry": (State.RETRY_READY, "retry_permitted"),
        "cancel": (State.CANCELLED, "cancelled_by_reviewer"),
    },
    # Read-only queues for a single decision, but a halted tool's "cancel all" reaches them.
    State.NEEDS_INPUT: {"cancel": (State.CANCELLED, "cancelled_by_reviewer")},
    State.WAITING_RETRY: {"cancel": (State.CANCELLED, "cancelled_by_reviewer")},
}

# Which timer a held state waits on.
TIMER_OF = {
    State.WAITING_RETRY: "retry_due",
    State.VERIFYING: "verification_deadline",
    State.AWAITING_APPROVAL: "approval_expired",
}
# The timer of an approved binding, in whatever state the step is (`Snapshot.approval_lapses_at`).
APPROVAL_LAPSE = "approval_lapsed"
