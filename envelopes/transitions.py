"""The one place where step transitions are applied.

`apply_event` is the one way to apply an event to a step, used by every door (the API, the
dashboard, a timer, a task): it locks the step row (creating the step when the event may), asks
`lifecycle.advance` what happens, copies the answer onto the row, appends the audit links, lets
the caller write the rows of the same change, saves the row and emits `step.state_changed`, all
in the caller's transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from accounts.models import Team

from . import lifecycle
from .audit import audit_append, audit_link
from .errors import StepNotFound, ToolLimitReached, ToolMismatch
from .events import event_emit
from .lifecycle import HELD, Outcome, Snapshot
from .models import AuditEvent, ErrorCode, Step, Tool
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


DEFAULT_MAX_TOOLS_PER_TEAM = 500


def tool_auto_register(*, team: Team, name: str) -> Tool:
    """The team's tool an envelope or attempt names, registered with defaults the first time,
    unless the team already has HOLDPOINT_MAX_TOOLS_PER_TEAM tools (ToolLimitReached: an agent
    inventing tool names must not grow the team's tables, pages and metrics without bound)."""
    for tool in Tool.objects.filter(team=team, name=name)[:1]:
        return tool
    limit = settings.HOLDPOINT_MAX_TOOLS_PER_TEAM
    try:
        with transaction.atomic():
            # New tools of one team are registered one at a time, so that racing requests cannot
            # pass the cap together (a tool is new once per name: this lock is rarely taken).
            list(Team.objects.select_for_update().filter(pk=team.pk).values_list("pk", flat=True))
            for tool in Tool.objects.filter(team=team, name=name)[:1]:
                return tool  # registered by the request we waited for
            if Tool.objects.filter(team=team).count() >= limit:
                raise ToolLimitReached(
                    f"This team already has {limit} tools, the most that agents may register; "
                    f"{name!r} is not one of them. An admin may configure it, or raise the limit.",
                    errors=[{"field": "tool", "rule": "tool_limit"}],
                )
            return Tool.objects.create(team=team, name=name)
    except IntegrityError:  # configured by an admin meanwhile (configuretool takes no team lock)
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


def mark_without_decisions(step: Step) -> None:
    """The step has no decisions (created in this transaction, or read with a check that it has
    none): what reads its decisions gets an empty list without a query."""
    step._prefetched_objects_cache = {"decisions": _no_decisions()}  # type: ignore[attr-defined]


@functools.cache
def _no_decisions() -> Any:
    """An empty queryset of decisions, built once, known empty (iterating it compiles nothing).
    Built per step it cost a filtered queryset each time (`step.decisions.none()`), ~5 % of an
    ingest's CPU (issue 14's profile)."""
    none = Step._meta.get_field("decisions").related_model._default_manager.none()  # type: ignore[union-attr]
    none._result_cache = []
    return none


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
    step.review_started_at = after.review_started_at
    step.approved_at = after.approved_at
    step.approval_lapses_at = after.approval_lapses_at
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
    append: Callable[..., AuditEvent] = audit_append,
) -> list[AuditEvent]:
    """Audit the refusal and the transition an outcome carries (`append`: `audit_link` builds
    the links without saving them, for `event_plan`)."""
    events = []
    if outcome.refusal:
        events.append(
            append(
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
            append(
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
    event: lifecycle.Event,
    actor: str,
    cause: str,
    now: datetime,
    step: Step | None = None,
    team: Team | None = None,
    tool: Tool | None = None,
    operation_ref: str = "",
    must_exist: bool = False,
    correlation_id: str = "",
    run_id: str = "",
    data: dict[str, Any] | None = None,
    before_save: Callable[[Applied], bool] | None = None,
) -> Applied:
    """Apply one event to one step: lock, snapshot, advance, copy, audit, save, emit.

    The step is `step`, already locked by the caller (a decision first checks what the reviewer
    saw, a timer locks with skip_locked), or else the team's step `operation_ref`, locked here:
    created when the event may create one (`tool` is then needed), StepNotFound when
    `must_exist`. A `tool` must be the step's (else ToolMismatch); it is the caller's fresh copy,
    with its circuit state. `data` goes into the audit links. `before_save(applied)` writes the
    caller's rows of the same change (its envelope, its attempt) before the step is saved and
    answers whether it changed the step row itself. The step is saved when anything of it
    changed, and `step.state_changed` is emitted when its state or reason did.
    """
    created = False
    if step is None:
        assert team is not None, "apply_event needs a locked step, or a team and an operation_ref"
        step = lock_step(team, operation_ref, joined=tool is None)
        if step is None:
            if must_exist or tool is None:
                raise StepNotFound(f"No step {operation_ref!r} in this team.")
            before = Snapshot(max_attempts=tool.max_attempts, halted_until=tool.halted_until)
            outcome = lifecycle.advance(before, event, now)
            if outcome.after.state is None:
                return Applied(step=None, outcome=outcome)  # refused before any step existed
            step = _step_insert(team, tool, operation_ref, outcome.after, now, correlation_id, run_id)
            if step is None:
                # Another request created it first: apply the event to that step instead.
                step = lock_step(team, operation_ref, joined=False)
                assert step is not None
            else:
                created = True
    if created:
        mark_without_decisions(step)
    else:
        if tool is not None:
            if step.tool_id != tool.pk:
                raise ToolMismatch(
                    f"Step {step.operation_ref!r} belongs to tool {step.tool.name!r}, not {tool.name!r}."
                )
            step.tool = tool
        before = step.snapshot()
        outcome = lifecycle.advance(before, event, now)
    due_at = step.due_at
    copy_snapshot(step, outcome.after)
    filled = False
    if not step.correlation_id and correlation_id:
        step.correlation_id, filled = correlation_id, True
    if not step.run_id and run_id:
        step.run_id, filled = run_id, True
    applied = Applied(step=step, outcome=outcome, created=created)
    applied.audit_events = record(step, before, outcome, actor=actor, cause=cause, now=now, data=data)
    touched = before_save(applied) if before_save is not None else False
    if created or applied.audit_events or touched or filled or outcome.after != before:
        step_save(step, now, created=created)
    elif step.due_at != due_at:
        step.save(update_fields=["due_at"])  # a stale timer column: no change of the step to announce
    if outcome.changed:
        emit_state_changed(step, cause)
    return applied


def event_plan(
    *,
    event: lifecycle.Event,
    actor: str,
    cause: str,
    now: datetime,
    team: Team,
    tool: Tool,
    operation_ref: str,
    step: Step | None,
    new_step_id: int | None,
    correlation_id: str = "",
    run_id: str = "",
    data: dict[str, Any] | None = None,
) -> Applied | None:
    """`apply_event`'s work without its writes, for a caller that writes the rows of the change
    itself in fewer round trips (envelopes.hot, the ingest's hot path): the step is `step`,
    locked by the caller, or else a new one numbered `new_step_id` (None: the event creates no
    step). Asks the machine, copies its answer, fills the ids, builds the audit links (hashed,
    unsaved: `applied.audit_events`). The caller then writes its own rows, saves the step with
    `step_save`'s changes (an INSERT when `applied.created`), the links, and, when
    `outcome.changed`, `step.state_changed`, all in its transaction."""
    created = step is None
    if step is None:
        before = Snapshot(max_attempts=tool.max_attempts, halted_until=tool.halted_until)
        outcome = lifecycle.advance(before, event, now)
        if outcome.after.state is None:
            return None
        step = Step(
            id=new_step_id,
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
        mark_without_decisions(step)
    else:
        if step.tool_id != tool.pk:
            raise ToolMismatch(f"Step {step.operation_ref!r} belongs to another tool, not {tool.name!r}.")
        step.tool = tool
        before = step.snapshot()
        outcome = lifecycle.advance(before, event, now)
    copy_snapshot(step, outcome.after)
    if not step.correlation_id and correlation_id:
        step.correlation_id = correlation_id
    if not step.run_id and run_id:
        step.run_id = run_id
    applied = Applied(step=step, outcome=outcome, created=created)
    applied.audit_events = record(
        step, before, outcome, actor=actor, cause=cause, now=now, data=data, append=audit_link
    )
    return applied


def _step_insert(
    team: Team, tool: Tool, operation_ref: str, after: Snapshot, now: datetime, correlation_id: str, run_id: str
) -> Step | None:
    """Insert the step an event creates; None when another transaction inserted it first."""
    assert after.state is not None
    step = Step(
        team=team,
        tool=tool,
        operation_ref=operation_ref,
        correlation_id=correlation_id,
        run_id=run_id,
        state=after.state.value,
        reason=after.reason,
        created_at=now,
        updated_at=now,
        state_entered_at=now,
    )
    copy_snapshot(step, after)
    try:
        with transaction.atomic():
            step.save(force_insert=True)
    except IntegrityError:
        return None
    return step
