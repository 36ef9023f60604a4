"""The one place where step transitions are applied.

`apply_event` locks the step row (creating the step when the event may), asks
`lifecycle.advance` what happens, copies the answer onto the row and appends the audit links;
the caller saves the row (`step_save`) and emits its webhook in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from webhooks.outbox import event_emit

from . import lifecycle
from .audit import audit_append
from .errors import StepNotFound, ToolMismatch
from .lifecycle import HELD, Outcome, Snapshot
from .models import AuditEvent, ErrorCode, Step, Team, Tool
from .presenters import step_representation

AGENT = "agent"
SYSTEM = "system"


def tool_get_or_register(*, team: Team, name: str) -> Tool:
    """The team's tool of that name, registered with defaults the first time it is named."""
    for tool in Tool.objects.filter(team=team, name=name)[:1]:
        return tool
    try:
        with transaction.atomic():
            return Tool.objects.create(team=team, name=name)
    except IntegrityError:
        return Tool.objects.get(team=team, name=name)


def lock_step(team: Team, operation_ref: str, *, joined: bool = True) -> Step | None:
    """The team's step of that ref, locked for this transaction (None: no such step).

    (team, operation_ref) is unique: a slice, not `.first()`, which would order by pk.
    `joined=False` skips the join of the tool and the last envelope (the ingest path has its
    own copy of the tool and, but for an ignored envelope, replaces the last envelope): on the
    hot path, compiling the joined columns cost more CPU than the query itself."""
    steps = Step.objects.select_for_update(of=("self",)).filter(team=team, operation_ref=operation_ref)
    if joined:
        steps = steps.select_related("tool", "last_envelope")
    return next(iter(steps[:1]), None)


def mark_new(step: Step) -> None:
    """A step created in this transaction has no decisions: its answer need not ask."""
    step._prefetched_objects_cache = {"decisions": step.decisions.none()}  # type: ignore[attr-defined]


def code_is_documented(*, tool: Tool, code: str) -> bool:
    return ErrorCode.objects.filter(Q(tool=tool) | Q(tool__isnull=True), team_id=tool.team_id, code=code).exists()


# --- applying the machine ------------------------------------------------------------------------


@dataclass
class Applied:
    step: Step | None  # None: the event was refused before any step existed
    outcome: Outcome
    created: bool = False
    audit_events: list[AuditEvent] = field(default_factory=list)


def copy_snapshot(step: Step, after: Snapshot) -> None:
    step.state = after.state.value if after.state else step.state
    step.reason = after.reason
    step.attempts = after.attempts
    step.last_fingerprint = after.last_fingerprint
    step.last_attempt_reported = after.last_attempt_reported
    step.approval_fingerprint = after.approval_fingerprint
    step.not_before = after.not_before
    step.trusted_after = after.trusted_after
    step.deadline = after.deadline
    step.expires_at = after.expires_at
    step.due_at = after.due_at


def record(
    step: Step,
    before: Snapshot,
    outcome: Outcome,
    *,
    actor: str,
    cause: str,
    now: datetime,
    data: dict[str, Any] | None = None,
) -> list[AuditEvent]:
    """Audit the refusal and the transition an outcome carries, and queue their webhooks."""
    events = []
    if outcome.refusal:
        events.append(
            audit_append(
                holder=step,
                kind=AuditEvent.Kind.REFUSAL,
                actor=actor,
                before=step.state if not outcome.changed else (before.state or ""),
                after=step.state if not outcome.changed else (before.state or ""),
                reason=outcome.refusal,
                data={"duplicate_prevented": outcome.duplicate_prevented, **(data or {})},
                now=now,
            )
        )
    if outcome.changed:
        held_seconds = None
        if before.state in HELD and before.state != outcome.after.state:
            held_seconds = max(0.0, (now - step.state_entered_at).total_seconds())
        if before.state != outcome.after.state:
            step.state_entered_at = now
        events.append(
            audit_append(
                holder=step,
                kind=AuditEvent.Kind.TRANSITION,
                actor=actor,
                before=before.state.value if before.state else "",
                after=step.state,
                reason=step.reason,
                held_seconds=held_seconds,
                data={"cause": cause, "effects": list(outcome.effects), **(data or {})},
                now=now,
            )
        )
    return events


# What a caller may change on a step that `apply_event` inserted in the same transaction: the
# audit links advance its chain head, the ingest points it at its envelope.
CHANGED_AFTER_INSERT = ("audit_seq", "audit_head", "last_envelope", "updated_at", "version")


def step_save(step: Step, now: datetime, *, created: bool = False) -> None:
    """Save the step with its version bumped. `created`: it was inserted in this transaction,
    so only CHANGED_AFTER_INSERT can differ from its row (an UPDATE of five columns, not all)."""
    step.updated_at = now
    step.version += 1
    step.save(update_fields=CHANGED_AFTER_INSERT if created else None)


def emit_state_changed(step: Step, cause: str) -> None:
    event_emit(
        team_id=step.team_id,
        event_type="step.state_changed",
        data=lambda: {"step": step_representation(step), "cause": cause},
        step_id=step.pk,
    )


def apply_event(
    *,
    team: Team,
    tool: Tool,
    operation_ref: str,
    event: lifecycle.Event,
    actor: str,
    cause: str,
    now: datetime,
    correlation_id: str = "",
    run_id: str = "",
    must_exist: bool = False,
) -> Applied:
    """Lock the step (creating it if the event may create it) and apply the event."""
    step = lock_step(team, operation_ref, joined=False)
    if step is None:
        if must_exist:
            raise StepNotFound(f"No step {operation_ref!r} in this team.")
        before = Snapshot(max_attempts=tool.max_attempts, halted_until=tool.halted_until)
        outcome = lifecycle.advance(before, event, now)
        if outcome.after.state is None:
            return Applied(step=None, outcome=outcome)
        step = Step(
            team=team,
            tool=tool,
            operation_ref=operation_ref,
            correlation_id=correlation_id,
            run_id=run_id,
            state=outcome.after.state.value,
            reason=outcome.after.reason,
            created_at=now,
            updated_at=now,
            state_entered_at=now,
        )
        copy_snapshot(step, outcome.after)
        try:
            with transaction.atomic():
                step.save(force_insert=True)
        except IntegrityError:
            # Another request created it first: apply the event to that step instead.
            step = lock_step(team, operation_ref, joined=False)
            assert step is not None
        else:
            mark_new(step)
            audit = record(step, before, outcome, actor=actor, cause=cause, now=now)
            return Applied(step=step, outcome=outcome, created=True, audit_events=audit)
    if step.tool_id != tool.pk:
        raise ToolMismatch(f"Step {operation_ref!r} belongs to tool {step.tool.name!r}, not {tool.name!r}.")
    step.tool = tool  # the caller's fresh copy (circuit state)
    before = step.snapshot()
    outcome = lifecycle.advance(before, event, now)
    copy_snapshot(step, outcome.after)
    if not step.correlation_id and correlation_id:
        step.correlation_id = correlation_id
    if not step.run_id and run_id:
        step.run_id = run_id
    audit = record(step, before, outcome, actor=actor, cause=cause, now=now)
    return Applied(step=step, outcome=outcome, audit_events=audit)
