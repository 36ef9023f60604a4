"""The wire shapes of the Holdpoint API (contract v1.1, sections 4 and 10), as TypedDicts.

Holdpoint may add fields within v1; it never renames these. Times are RFC 3339 strings."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Action = Literal["proceed", "wait", "verify", "fix_input", "hold", "stop"]
StepState = Literal[
    "in_progress",
    "needs_input",
    "waiting_retry",
    "retry_ready",
    "verifying",
    "awaiting_approval",
    "escalated",
    "succeeded",
    "cancelled",
    "failed",
]
VerificationOutcome = Literal["committed", "not_found", "unavailable"]


class Directive(TypedDict):
    action: Action
    may_write: bool
    not_before: str | None
    reason: str
    # v1.1: after an approval with an edited input, until an attempt uses it: the agent runs
    # exactly this input.
    input: NotRequired[dict[str, Any]]
    input_fingerprint: NotRequired[str]


class EnvelopeSummary(TypedDict):
    envelope_id: int
    ok: bool
    code: str | None
    category: str | None
    commit_state: str | None
    next_action: str | None
    scope: str | None
    resource_id: str | None
    safe_details: dict[str, Any]
    occurred_at: str | None


class DecisionRecord(TypedDict):
    action: str
    reviewer: str
    reason: str
    decided_at: str
    input_fingerprint: NotRequired[str | None]  # v1.1: the fingerprint an approval bound
    edited: NotRequired[bool]  # v1.1: the reviewer approved an edited input


class Proposal(TypedDict):
    """v1.1: the latest attempt's input as Holdpoint stored it (redacted)."""

    attempt: int
    input_fingerprint: str
    input: dict[str, Any] | None
    input_redacted: bool
    proposed_at: str


class Step(TypedDict):
    operation_ref: str
    tool: str
    state: StepState
    held: bool
    reason: str
    correlation_id: str | None
    run_id: str | None
    attempts: int
    max_attempts: int
    not_before: str | None
    deadline: str | None
    directive: Directive
    last_envelope: EnvelopeSummary | None
    decisions: list[DecisionRecord]
    proposal: NotRequired[Proposal | None]  # v1.1
    trace_id: NotRequired[str | None]  # v1.2: the agent's latest W3C trace id on the step
    approvals_required: NotRequired[int]  # v1.2 (§12): distinct eligible approvals that release it
    approver_group: NotRequired[str | None]  # v1.2 (§12): the group that alone may decide, or None
    created_at: str
    updated_at: str
    url: str


class IngestAnswer(TypedDict):
    envelope_id: int
    correlation_id: str
    step: Step
    directive: Directive
    dropped_detail_keys: list[str]
    flags: NotRequired[list[str]]


class AttemptGrant(TypedDict):
    attempt: int
    step: Step
    directive: Directive


class StepAnswer(TypedDict):
    step: Step
    directive: Directive


class StepPage(TypedDict):
    results: list[Step]
    next: str | None


DecisionAction = Literal["approve", "reject", "mark_committed", "permit_retry", "cancel"]
QueueKind = Literal["approvals", "verifications", "escalations"]


class GrantRecord(TypedDict, total=False):
    """A standing grant made with an approval (contract §11)."""

    id: int
    tool: str
    when: str
    when_in_words: str
    scope: str
    created_by: str
    expires_at: str
    max_uses: int
    uses: int


class DecisionAnswer(TypedDict):
    """The reviewer API's answer to a decision (contract §10); `grant` when the approval made one."""

    decision: DecisionRecord
    step: Step
    grant: NotRequired[GrantRecord]


class ErrorCodeEntry(TypedDict):
    code: str
    scope: Literal["tool", "team"]
    category: str
    retry_class: str
    next_action: str
    side_effect: str
    description: str
    hint: str


class CodeList(TypedDict):
    tool: str
    codes: list[ErrorCodeEntry]


class SkippedResource(TypedDict):
    resource_id: str
    correlation_id: str
    code: str
    operation_ref: str
    occurred_at: str


class Skipped(TypedDict):
    run_id: str
    skipped: list[SkippedResource]


# The metrics answer is wide and grows with minor versions: read it as a mapping.
Metrics = dict[str, Any]


class WebhookEvent(TypedDict):
    type: str
    timestamp: str
    data: dict[str, Any]
