"""The one place where step transitions are applied.

`apply_event` is the one way to apply an event to a step, used by every door (the API, the
dashboard, a timer, a task, every reviewer channel). It is three pieces, each written once:

1. the step's context (`step_context`, in its own module): its tool, the step locked for the
   transaction, and the ids of the rows to write, in one read (`_context_sql` on PostgreSQL, the ORM elsewhere; a tool
   named for the first time is registered in a transaction of its own: `ToolUnknown`);
2. the plan (`event_plan`): what the event does to the step, `lifecycle.advance`'s answer copied
   onto the row, its audit links hashed, the caller's rows (its envelope, its attempt, its
   decision) and the domain events, nothing written yet;
3. the writer (`plan_write`), the one writer of Step rows: on PostgreSQL one statement for the
   step, its links, the rows, the events and the consumers' folds (`modelsql`); elsewhere
   `save()` of the same instances and `events.event_emit`. All in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from accounts.models import Team

from . import lifecycle, modelsql, policy_acts
from .audit import audit_link
from .errors import StepNotFound, ToolMismatch
from .events import Consumer, DomainEvent, Fold, consumers, event_emit, folder_of
from .lifecycle import Outcome, Snapshot
from .models import AuditEvent, Step, Tool
from .presenters import step_representation
from .states import HELD, State
from .step_context import StepContext, ToolUnknown, lock_step, mark_without_decisions, tool_auto_register
from .tracing import step_trace_fill, transition_span_end, transition_span_start

AGENT = "agent"
SYSTEM = "system"


# --- the plan: what an event does to a step ------------------------------------------------------


@dataclass
class Plan:
    """What applying an event does, nothing written yet: the step (new, or as locked) with the
    machine's answer copied onto it, its audit links (hashed, unsaved), the caller's rows of the
    same change, and the domain events (`step.state_changed` when the outcome changed, then the
    caller's: `announce`). `plan_write` writes it."""

    step: Step | None  # None: the event was refused before any step existed
    outcome: Outcome
    cause: str = ""
    now: datetime | None = None
    created: bool = False
    audit_events: list[AuditEvent] = field(default_factory=list)
    rows: list[models.Model] = field(default_factory=list)
    announce: list[tuple[str, Callable[[], dict[str, Any]]]] = field(default_factory=list)
    changed: bool = False  # something of the step row changed besides its timer column
    timers_changed: bool = False  # only the swept timer columns (TIMER_COLUMNS) changed
    step_shape: dict[str, Any] | None = None  # the step as its state_changed event carried it


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


# The columns beat's sweeps read (the step's next timer, its escalation): a stale one is
# rewritten alone, with no change of the step to announce.
TIMER_COLUMNS = ("due_at", "escalation_due_at")


def _timers(step: Step) -> tuple[datetime | None, ...]:
    return tuple(getattr(step, column) for column in TIMER_COLUMNS)


def escalation_schedule(step: Step, now: datetime) -> None:
    """A state entered: a request for approval of a tool that escalates is due to widen its
    deciders escalate_after_s from now (contract §12); any other state owes no escalation."""
    after, group = step.tool.escalate_after_s, step.tool.escalate_to
    waits = step.state == State.AWAITING_APPROVAL and after is not None and group
    step.escalation_due_at = now + timedelta(seconds=after) if waits and after is not None else None
    step.escalated_to = ""


def record(
    step: Step,
    before: Snapshot,
    outcome: Outcome,
    *,
    actor: str,
    cause: str,
    now: datetime,
    data: dict[str, Any] | None,
) -> list[AuditEvent]:
    """The audit links of the refusal and the transition an outcome carries (hashed, unsaved)."""
    events = []
    if outcome.refusal:
        events.append(
            audit_link(
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
            audit_link(
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


def event_plan(
    *,
    context: StepContext,
    event: lifecycle.Event | None,
    actor: str,
    cause: str,
    now: datetime,
    must_exist: bool = False,
    correlation_id: str = "",
    run_id: str = "",
    data: dict[str, Any] | None = None,
    links: Callable[[Step], list[AuditEvent]] | None = None,
    policy: policy_acts.PolicyConsult | None = None,
) -> Plan:
    """What `event` does to the context's step: the machine asked, its answer copied, the ids
    filled, the audit links built. The step is the context's (locked), or else a new one
    numbered `context.new_step_id` when the event creates one (StepNotFound when `must_exist`).
    A context `tool` must be the step's (else ToolMismatch). `links(step)` builds the caller's
    own audit links, before the machine's (a decision's). `event` None: no act for the machine
    (a decision not final yet), only the caller's links and rows."""
    step, tool = context.step, context.tool
    created = False
    if step is None:
        if must_exist or tool is None or event is None:
            raise StepNotFound(f"No step {context.operation_ref!r} in this team.")
        before = Snapshot(max_attempts=tool.max_attempts, halted_until=tool.halted_until)
        outcome = _advance(None, before, event, now, policy)
        if outcome.after.state is None:
            return Plan(step=None, outcome=outcome, cause=cause, now=now)  # refused before any step existed
        assert context.team is not None and context.new_step_id is not None, "a new step needs its team and number"
        step = modelsql.new(
            Step,
            id=context.new_step_id,
            team=context.team,
            tool=tool,
            operation_ref=context.operation_ref,
            correlation_id=correlation_id,
            run_id=run_id,
            state=outcome.after.state.value,
            reason=outcome.after.reason,
            created_at=now,
            updated_at=now,
            state_entered_at=now,
        )
        mark_without_decisions(step)
        created = True
    else:
        if tool is not None:
            if step.tool_id != tool.pk:
                raise ToolMismatch(
                    f"Step {step.operation_ref!r} belongs to tool {step.tool.name!r}, not {tool.name!r}."
                )
            step.tool = tool
        before = step.snapshot()
        outcome = _advance(step, before, event, now, policy)
    timers = _timers(step)
    own = links(step) if links is not None else []  # the caller's links see the step as it was
    copy_snapshot(step, outcome.after)
    filled = False
    if not step.correlation_id and correlation_id:
        step.correlation_id, filled = correlation_id, True
    if not step.run_id and run_id:
        step.run_id, filled = run_id, True
    filled = (actor == AGENT and step_trace_fill(step)) or filled
    plan = Plan(step=step, outcome=outcome, cause=cause, now=now, created=created)
    plan.audit_events = [*own, *record(step, before, outcome, actor=actor, cause=cause, now=now, data=data)]
    if created or before.state != outcome.after.state:
        escalation_schedule(step, now)
    plan.changed = created or bool(plan.audit_events) or filled or outcome.after != before
    plan.timers_changed = _timers(step) != timers
    return plan


def _advance(step: Step | None, before: Snapshot, event: lifecycle.Event | None, now: datetime, policy: Any) -> Outcome:
    """The machine's answer to `event` (None: no act), or to the event the team's rules make of
    it (§11: the gate's deny or hold of a call the machine would grant)."""
    if event is None:
        return Outcome(after=before, changed=False)
    outcome = lifecycle.advance(before, event, now)
    ruled = policy.consult(step, before, event, outcome) if policy is not None else None
    return lifecycle.advance(before, ruled, now) if ruled is not None else outcome


# --- the writer: the one writer of Step rows -----------------------------------------------------


def plan_write(plan: Plan) -> dict[str, Any] | None:
    """Write a plan in the caller's transaction: the step with its version bumped when anything
    of it changed (an INSERT when it is new; only its timer column when only that is stale), its
    audit links, the caller's rows, and its domain events, each handed to the consumers as
    `events.event_emit` hands them. On PostgreSQL all of it is one statement, in which the
    consumers that offer a fold (`events.folder_of`) do their work; the others are called after
    it. Elsewhere, `save()` of the same instances. Returns the step's shape its
    `step.state_changed` carried (None: no such event), which the answer reuses: the step does
    not change after this."""
    step = plan.step
    if step is None:
        return None
    write = plan.changed or bool(plan.rows)
    if write:
        step.updated_at = plan.now or timezone.now()
        step.version += 1
    emitted: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if plan.outcome.changed:
        emitted.append(("step.state_changed", lambda: {"step": step_representation(step), "cause": plan.cause}))
    emitted += plan.announce
    rows = [row for row in [*plan.rows, *plan.audit_events] if row._state.adding]
    if connection.vendor != "postgresql":
        for row in plan.rows:
            if row._state.adding:
                row.save(force_insert=True)
        if write:
            step.save(force_insert=step._state.adding)
        elif plan.timers_changed:
            step.save(update_fields=TIMER_COLUMNS)  # a stale timer column: no change of the step to announce
        for link in plan.audit_events:
            link.save(force_insert=True)
        shape = None
        for event_type, data in emitted:
            body = data()
            shape = body["step"] if event_type == "step.state_changed" else shape
            event_emit(team_id=step.team_id, event_type=event_type, data=body, step_id=step.pk)
        plan.step_shape = shape
        return shape
    statements = []
    if write:
        statements.append(modelsql.insert(step) if step._state.adding else modelsql.update(step))
    elif plan.timers_changed:
        statements.append(modelsql.update(step, TIMER_COLUMNS))
    statements += [modelsql.insert(row) for row in rows]
    folds: list[Fold] = []
    called: list[tuple[Consumer, dict[str, Any]]] = []
    shape = None
    events = []
    for event_type, data in emitted:
        body = data()
        shape = body["step"] if event_type == "step.state_changed" else shape
        event = modelsql.new(
            DomainEvent,
            team_id=step.team_id,
            type=event_type,
            step_id=step.pk,
            tool=step.tool.name,
            data=body,
            created_at=timezone.now(),
        )
        events.append(event)
        statements.append(modelsql.insert(event))
        handed: dict[str, Any] = {"team_id": step.team_id, "event_type": event_type, "data": body, "step_id": step.pk}
        for consumer in consumers():
            folder = folder_of(consumer)
            fold = folder(**handed) if folder else None
            if fold is None:
                called.append((consumer, handed))
            else:
                folds.append(fold)
    if not statements:
        return None
    modelsql.mark_saved(step, *rows, *events)

    def written(counts: Sequence[int]) -> None:
        for fold, count in zip(folds, counts, strict=True):  # one count per fold
            fold.written(count)
        for consumer, handed in called:
            consumer(**handed)

    # Within an Idempotency-Key's transaction, held for the statement that stores its answer.
    modelsql.write(statements, [(f.sql, f.params) for f in folds], written)
    plan.step_shape = shape
    return shape


# --- applying an event: context, plan, write -----------------------------------------------------


def apply_event(
    *,
    event: lifecycle.Event | None,
    actor: str,
    cause: str,
    now: datetime,
    step: Step | None = None,
    context: StepContext | None = None,
    team: Team | None = None,
    tool: Tool | None = None,
    operation_ref: str = "",
    must_exist: bool = False,
    correlation_id: str = "",
    run_id: str = "",
    data: dict[str, Any] | None = None,
    links: Callable[[Step], list[AuditEvent]] | None = None,
    rows: Callable[[Plan], list[models.Model]] | None = None,
    announce: Callable[[Plan], list[tuple[str, Callable[[], dict[str, Any]]]]] | None = None,
    policy: policy_acts.PolicyConsult | None = None,
) -> Plan:
    """Apply one event to one step: its context, `event_plan`, `plan_write`.

    The context is `context` (read by the caller: `step_context`), or `step`, already locked by
    the caller (a decision first checks what the reviewer saw, a timer locks with skip_locked),
    or else the team's step `operation_ref`, locked here; created when the event may create one
    (`tool` is then needed), StepNotFound when `must_exist`. A `tool` is the caller's fresh copy,
    with its circuit state, and must be the step's (else ToolMismatch). `data` goes into the
    machine's audit links, `links(step)` builds the caller's own before them. `rows(plan)`: the
    caller's rows of the same change (its envelope, its attempt), unsaved; `announce(plan)`: its
    domain events, after `step.state_changed`; `policy` (`policy_acts.PolicyConsult`): the team's
    rules asked of the event. A step created by another transaction meanwhile raises
    IntegrityError from the write: the caller runs again (`on_step_race`)."""
    span = transition_span_start(cause=cause, actor=actor)
    if context is None:
        if step is None:
            assert team is not None, "apply_event needs a locked step, or a team and an operation_ref"
            step = lock_step(team, operation_ref)
            new_step_id = modelsql.next_id(Step) if step is None and tool is not None and not must_exist else None
            context = StepContext(team=team, tool=tool, step=step, operation_ref=operation_ref, new_step_id=new_step_id)
        else:
            context = StepContext(team=team, tool=tool, step=step, operation_ref=step.operation_ref)
    plan = event_plan(
        context=context,
        event=event,
        actor=actor,
        cause=cause,
        now=now,
        must_exist=must_exist,
        correlation_id=correlation_id,
        run_id=run_id,
        # The consult adds what acted to the links' data while the plan is made.
        data=data if policy is None else policy.audit_data_with(data),
        links=links,
        policy=policy,
    )
    if plan.step is not None:
        if rows is not None:
            plan.rows += rows(plan)
        if policy is not None:
            plan.rows += policy.rows(plan)
        if announce is not None:
            plan.announce += announce(plan)
    plan_write(plan)
    if policy is not None:
        policy.written(plan)
    transition_span_end(span, plan)
    return plan


T = TypeVar("T")


# Set by a caller whose own transaction holds the work (an Idempotency-Key's, envelopes.api) and
# that runs it all again when the work raises (`RunAgain`): the work then needs no savepoint.
_IN_CALLERS_TRANSACTION: ContextVar[bool] = ContextVar("in_callers_transaction", default=False)


class RunAgain(Exception):
    """The work raised inside its caller's transaction, which had no savepoint for it: that
    transaction is lost. The caller rolls it back and runs it again, outside `in_callers_transaction`."""


@contextmanager
def in_callers_transaction() -> Iterator[None]:
    """`on_step_race` runs its work in the caller's transaction, without the SAVEPOINT and
    RELEASE of a nested one (two round trips a keyed call does not need); whatever the work
    raises becomes `RunAgain`."""
    token = _IN_CALLERS_TRANSACTION.set(True)
    try:
        yield
    finally:
        _IN_CALLERS_TRANSACTION.reset(token)


def on_step_race(work: Callable[[], T], *, team: Team | None = None) -> T:
    """Run `work` in a transaction of its own, and once more if another transaction created the
    step it creates first (its INSERT's IntegrityError): the second run finds that step. A
    `ToolUnknown` registers the tool for `team` between two runs. Within
    `in_callers_transaction`, in the caller's transaction (see there)."""
    if _IN_CALLERS_TRANSACTION.get() and connection.in_atomic_block:
        try:
            with transaction.atomic(savepoint=False):
                return work()
        except Exception as error:
            raise RunAgain() from error
    try:
        try:
            with transaction.atomic():
                return work()
        except ToolUnknown as unknown:
            assert team is not None, "a work that names tools needs its team"
            tool_auto_register(team=team, name=unknown.name)
            with transaction.atomic():
                return work()
    except IntegrityError:
        with transaction.atomic():
            return work()
