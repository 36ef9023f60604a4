"""The one place where step transitions are applied.

`apply_event` is the one way to apply an event to a step, used by every door (the API, the
dashboard, a timer, a task, every reviewer channel). It is three pieces, each written once:

1. the step's context (`step_context`): its tool, the step locked for the transaction, and the
   ids of the rows to write, in one read (`_context_sql` on PostgreSQL, the ORM elsewhere; a tool
   named for the first time is registered in a transaction of its own: `ToolUnknown`);
2. the plan (`event_plan`): what the event does to the step, `lifecycle.advance`'s answer copied
   onto the row, its audit links hashed, the caller's rows (its envelope, its attempt, its
   decision) and the domain events, nothing written yet;
3. the writer (`plan_write`), the one writer of Step rows: on PostgreSQL one statement for the
   step, its links, the rows, the events and the consumers' folds (`modelsql`); elsewhere
   `save()` of the same instances and `events.event_emit`. All in the caller's transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.db.models import Q, prefetch_related_objects
from django.utils import timezone

from accounts.models import Team

from . import lifecycle, modelsql, policy_acts
from .audit import audit_link
from .errors import StepNotFound, ToolLimitReached, ToolMismatch
from .events import Consumer, DomainEvent, Fold, consumers, event_emit, folder_of
from .lifecycle import HELD, Outcome, Snapshot
from .models import Attempt, AuditEvent, Decision, Envelope, ErrorCode, ProposedInput, Step, Tool
from .presenters import decisions_prefetch, step_representation
from .proposal import proposal_from_rows, proposal_remember
from .tracing import step_trace_fill, transition_span_end, transition_span_start

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


def mark_without_decisions(step: Step) -> None:
    """The step has no decisions (created in this transaction, or read with a check that it has
    none): what reads its decisions gets an empty list without a query."""
    step._prefetched_objects_cache = {"decisions": _no_decisions()}  # type: ignore[attr-defined]


@functools.cache
def _no_decisions() -> Any:
    """An empty queryset of decisions, built once, known empty (iterating it compiles nothing):
    built per step, `step.decisions.none()` cost a filtered queryset each time."""
    none = Decision.objects.none()
    none._result_cache = []
    return none


def code_is_documented(*, tool: Tool, code: str) -> bool:
    return ErrorCode.objects.filter(Q(tool=tool) | Q(tool__isnull=True), team_id=tool.team_id, code=code).exists()


# --- the step's context: one read ----------------------------------------------------------------


@dataclass
class StepContext:
    """What an event is applied to: the team's step `operation_ref` locked for this transaction
    (None: no such step yet) and its tool, the caller's fresh copy with its circuit state (None:
    the caller names none). `new_step_id` numbers the step the event may create; `envelope_id`
    the envelope an ingest stores; `documented`: whether the ingest's code is in the catalog."""

    team: Team | None  # needed for a new step only
    tool: Tool | None
    step: Step | None
    operation_ref: str = ""
    new_step_id: int | None = None
    envelope_id: int | None = None
    documented: bool = True
    # The team's rules of the tool and live grants, as policy_acts.policy_ids_sql names them.
    rule_versions: str | None = None
    grant_uses: str | None = None


class ToolUnknown(Exception):
    """The team has no tool of this name yet: the caller leaves its transaction (nothing written),
    registers the tool in one of its own (`tool_auto_register` locks the team row, which must not
    be held while the step is written: the step's INSERT checks its team key) and runs again."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def step_context(
    *, team: Team, tool_name: str, operation_ref: str, code: str | None = None, ingest: bool = False
) -> StepContext | None:
    """The context of an ingest (`ingest`: with the envelope's id and whether `code` is
    documented) or of an attempt request, in the caller's transaction; None when the team has
    no tool `tool_name` (the caller registers it and asks again). The step comes with its last
    envelope, its tool, its decisions (or the knowledge that it has none) and its proposal, as
    the answer reads them."""
    if connection.vendor == "postgresql":
        return _context_read(team, tool_name, operation_ref, code if ingest else None, ingest)
    tool = next(iter(Tool.objects.filter(team=team, name=tool_name)[:1]), None)
    if tool is None:
        return None
    step = lock_step(team, operation_ref)
    rule_versions, grant_uses = policy_acts.policy_ids_read(team=team, tool=tool_name)
    return StepContext(
        team=team,
        tool=tool,
        step=step,
        operation_ref=operation_ref,
        new_step_id=modelsql.next_id(Step) if step is None else None,
        documented=ingest and bool(code) and code_is_documented(tool=tool, code=code or ""),
        rule_versions=rule_versions,
        grant_uses=grant_uses,
    )


def lock_step(team: Team, operation_ref: str) -> Step | None:
    """The team's step of that ref, locked for this transaction, with its tool and last envelope
    (None: no such step). (team, operation_ref) is unique: a slice, not `.first()`, which would
    order by pk."""
    steps = Step.objects.select_for_update(of=("self",)).filter(team=team, operation_ref=operation_ref)
    return next(iter(steps.select_related("tool", "last_envelope")[:1]), None)


def _context_read(team: Team, tool_name: str, operation_ref: str, code: str | None, ingest: bool) -> StepContext | None:
    """`_context_sql`'s one read. A statement that waited for the step's lock reads the step as
    the other transaction committed it, but every row it joins (the last envelope, the attempts,
    the decisions) as its snapshot saw them before the wait: stale, and the step would be written
    back with them. The read says when the step it locked is newer than its snapshot, and then
    reads again, the lock ours and its snapshot taken after the other transaction's commit."""
    params = {"team": team.pk, "tool": tool_name, "ref": operation_ref, "code": code or ""}
    row = modelsql.fetchone_bound(_context_sql(ingest), params)
    if row is not None and row[_WAITED]:
        row = modelsql.fetchone_bound(_context_sql(ingest), params)
    if row is None:
        return None
    rule_versions, grant_uses = row[_RULES], row[_GRANTS]
    at = _GRANTS + 1
    tool: Tool = modelsql.from_row(Tool, row[at:])
    at += len(modelsql.column_fields(Tool))
    documented, new_step_id, envelope_id, has_decisions = row[at : at + 4]
    at += 4
    attempt_row = row[at : at + len(modelsql.column_fields(Attempt))]
    at += len(modelsql.column_fields(Attempt))
    refused_row = row[at : at + len(modelsql.column_fields(ProposedInput))]
    at += len(modelsql.column_fields(ProposedInput))
    envelope_row = row[at : at + len(modelsql.column_fields(Envelope))]
    at += len(modelsql.column_fields(Envelope))
    step: Step | None = None
    if row[at] is not None:
        step = modelsql.from_row(Step, row[at:])
        step.team = team  # its tool: the context's, once event_plan checked it is the step's
        if envelope_row[0] is not None:
            step.last_envelope = modelsql.from_row(Envelope, envelope_row)
        if has_decisions:
            prefetch_related_objects([step], decisions_prefetch())
        else:  # no decisions to read: the answer need not ask
            mark_without_decisions(step)
        # proposal.proposal_of, from the rows read above (one rule: proposal.proposal_from_rows).
        attempt = modelsql.from_row(Attempt, attempt_row) if attempt_row[0] is not None else None
        refused = modelsql.from_row(ProposedInput, refused_row) if refused_row[0] is not None else None
        proposal_remember(step, proposal_from_rows(step, attempt=attempt, refused=refused))
    return StepContext(
        team=team,
        tool=tool,
        step=step,
        operation_ref=operation_ref,
        new_step_id=new_step_id,
        envelope_id=envelope_id,
        documented=bool(documented),
        rule_versions=rule_versions,
        grant_uses=grant_uses,
    )


_WAITED, _RULES, _GRANTS = 0, 1, 2  # the context row's first columns

# Whether the step row's version (its xmin, 32 bits) was committed by another transaction after
# the statement's snapshot was taken: it was locked after waiting for its writer. The xmin is
# widened to 64 bits by its signed distance to the snapshot's xmax (live xids are within 2^31 of
# it; a frozen one may read as newer, which only costs a second read); this transaction's own
# versions are in progress, not committed.
_XMAX = "pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
_XMIN = (
    f"(({_XMAX} - ((({_XMAX} % 4294967296) - s.xmin::text::bigint + 2147483648) % 4294967296 - 2147483648))"
    "::text::xid8)"
)
_NEWER_THAN_SNAPSHOT = (
    f"(NOT pg_visible_in_snapshot({_XMIN}, pg_current_snapshot()) AND pg_xact_status({_XMIN}) = 'committed')"
)


@functools.cache
def _context_sql(ingest: bool) -> str:
    """Whether the step was locked after a wait (see `_context_read`), the team's rules and live
    grants of the tool (`policy_acts.policy_ids_sql`), the tool, for an envelope
    whether its code is documented, the new rows' ids, the step locked FOR UPDATE with whether it
    has decisions, what its proposal reads (the latest attempt,
    or the refused input the binding names: proposal.proposal_of) and its last envelope."""
    step_fk = Decision._meta.get_field("step").column
    q, table = modelsql.quote, modelsql.table
    step_id = f"s.{q('id')}"
    # The tool's own code or a team-wide one: two lookups, each on its partial unique index.
    codes = table(ErrorCode)
    documented = (
        f"(EXISTS (SELECT 1 FROM {codes} c WHERE c.{q('tool_id')} = t.{q('id')} AND c.{q('code')} = %(code)s "  # noqa: S608
        f"AND c.{q('team_id')} = %(team)s) "
        f"OR EXISTS (SELECT 1 FROM {codes} c WHERE c.{q('team_id')} = %(team)s AND c.{q('code')} = %(code)s "
        f"AND c.{q('tool_id')} IS NULL))"
        if ingest
        else "true"
    )
    envelope_id = f"nextval({modelsql.sequence(Envelope)})" if ingest else "NULL::bigint"
    same_step = f"{q('team_id')} = %(team)s AND {q('operation_ref')} = %(ref)s"
    return (
        f"SELECT {step_id} IS NOT NULL AND {_NEWER_THAN_SNAPSHOT}, "  # noqa: S608
        f"{policy_acts.policy_ids_sql()}, "
        f"{modelsql.select_list(Tool, 't')}, {documented}, "
        f"CASE WHEN {step_id} IS NULL THEN nextval({modelsql.sequence(Step)}) END, "
        f"{envelope_id}, "
        f"{step_id} IS NOT NULL AND EXISTS (SELECT 1 FROM {table(Decision)} d "
        f"WHERE d.{q(step_fk)} = {step_id}), "
        f"{modelsql.select_list(Attempt, 'a')}, {modelsql.select_list(ProposedInput, 'p')}, "
        f"{modelsql.select_list(Envelope, 'e')}, "
        f"{modelsql.select_list(Step, 's')} "
        f"FROM {table(Tool)} t LEFT JOIN LATERAL ("
        f"SELECT *, xmin FROM {table(Step)} WHERE {same_step} FOR UPDATE) s ON true "
        f"LEFT JOIN LATERAL (SELECT * FROM {table(Attempt)} WHERE {q('step_id')} = {step_id} "
        f"AND s.{q('last_fingerprint')} <> '' ORDER BY {q('number')} DESC LIMIT 1) a ON true "
        f"LEFT JOIN LATERAL (SELECT * FROM {table(ProposedInput)} WHERE {q('step_id')} = {step_id} "
        f"AND s.{q('approval_fingerprint')} NOT IN ('', s.{q('last_fingerprint')}) "
        f"AND {q('fingerprint')} = s.{q('approval_fingerprint')} ORDER BY {q('id')} DESC LIMIT 1) p ON true "
        f"LEFT JOIN {table(Envelope)} e ON e.{q('id')} = s.{q('last_envelope_id')} "
        f"WHERE t.{q('team_id')} = %(team)s AND t.{q('name')} = %(tool)s"
    )


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
    due_at_changed: bool = False
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
        step = Step(
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
    own = links(step) if links is not None else []  # the caller's links see the step as it was
    due_at = step.due_at
    copy_snapshot(step, outcome.after)
    filled = False
    if not step.correlation_id and correlation_id:
        step.correlation_id, filled = correlation_id, True
    if not step.run_id and run_id:
        step.run_id, filled = run_id, True
    filled = (actor == AGENT and step_trace_fill(step)) or filled
    plan = Plan(step=step, outcome=outcome, cause=cause, now=now, created=created)
    plan.audit_events = [*own, *record(step, before, outcome, actor=actor, cause=cause, now=now, data=data)]
    plan.changed = created or bool(plan.audit_events) or filled or outcome.after != before
    plan.due_at_changed = step.due_at != due_at
    return plan


def _advance(
    step: Step | None, before: Snapshot, event: lifecycle.Event | None, now: datetime, policy: Any
) -> Outcome:
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
        elif plan.due_at_changed:
            step.save(update_fields=["due_at"])  # a stale timer column: no change of the step to announce
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
    elif plan.due_at_changed:
        statements.append(modelsql.update(step, ("due_at",)))
    statements += [modelsql.insert(row) for row in rows]
    folds: list[Fold] = []
    called: list[tuple[Consumer, dict[str, Any]]] = []
    shape = None
    events = []
    for event_type, data in emitted:
        body = data()
        shape = body["step"] if event_type == "step.state_changed" else shape
        event = DomainEvent(
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
    if folds:
        counts = modelsql.fetchone_bound(*modelsql.combined(statements, [(f.sql, f.params) for f in folds]))
    else:
        counts = ()
        modelsql.execute_bound(*modelsql.combined(statements))
    modelsql.mark_saved(step, *rows, *events)
    for fold, count in zip(folds, counts or (), strict=True):  # one count per fold
        fold.written(count)
    for consumer, handed in called:
        consumer(**handed)
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


def on_step_race(work: Callable[[], T], *, team: Team | None = None) -> T:
    """Run `work` in a transaction of its own, and once more if another transaction created the
    step it creates first (its INSERT's IntegrityError): the second run finds that step. A
    `ToolUnknown` registers the tool for `team` between two runs."""
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
