"""What can happen to a step, as the machine's inputs (contract §3): an envelope, an attempt
request, a verification report, a timer, a reviewer's act. Plain data, no Django: the doors build
one and `lifecycle.advance` answers it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class EnvelopeArrived:
    ok: bool
    commit_state: str | None = None
    next_action: str | None = None
    max_attempts_remaining: int | None = None
    not_before: datetime | None = None
    attempt: int | None = None
    occurred_at: datetime | None = None
    consistency_window_s: int = 300
    verification_deadline_s: int = 3600
    approval_ttl_s: int = 86400


@dataclass(frozen=True)
class EnvelopeRejected:
    """A payload that broke the contract but named its step."""


@dataclass(frozen=True)
class AttemptRequested:
    fingerprint: str
    consistency_window_s: int = 300
    verification_deadline_s: int = 3600
    approval_ttl_s: int = 86400
    # What the team's rules said of a call the machine would grant (contract §11, asked by the
    # gate first): "deny" refuses it to needs_input, "hold" sends it to a reviewer; "": grant.
    rule_effect: str = ""


@dataclass(frozen=True)
class RuleDenied:
    """An enforced deny rule matched the input a step waits to have approved (§11): no reviewer
    may approve it, the agent must change it."""


@dataclass(frozen=True)
class VerificationReported:
    outcome: str  # committed | not_found | unavailable


@dataclass(frozen=True)
class TimerFired:
    timer: str  # retry_due | verification_deadline | approval_expired | approval_lapsed
    # What an expired request for approval becomes (the tool's on_approval_expiry, contract
    # §12): cancelled, or escalated to a human; never approved.
    on_expiry: str = "cancel"


@dataclass(frozen=True)
class ReviewerActed:
    action: str  # approve | reject | mark_committed | permit_retry | cancel
    # An approval of an edited input binds that input's fingerprint instead of the one under
    # review (contract §3); None: the approval binds what the step holds.
    fingerprint: str | None = None
    # The tool's, for the approval's lapse and a fresh expiry when the step goes back to review.
    approval_ttl_s: int = 86400
    # An approval by a rule or a grant (§11) gives its own reason (approved_by_rule, _by_grant).
    reason: str = ""


Event = (
    EnvelopeArrived
    | EnvelopeRejected
    | AttemptRequested
    | VerificationReported
    | TimerFired
    | ReviewerActed
    | RuleDenied
)
