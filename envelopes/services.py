"""Every write of the agent side: envelopes, the attempt gate, verification, timers, circuits.

Each function runs in one transaction and applies its event through `transitions.apply_event`
(the step's context, the plan, the one writer). Views, tasks, commands and the approvals app
call these; nothing else sets `step.state`. The rare cases (a new tool, a rejected envelope, a
halt, a skipped resource, a race creating a step) are branches around the same plan.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import prefetch_related_objects
from django.utils import timezone

from accounts.models import Team

from . import lifecycle, modelsql, schema
from .audit import audit_append, audit_link
from .errors import (
    AttemptRefused,
    EnvelopeInvalid,
    HoldpointError,
    StepNotFound,
    ToolLimitReached,
    ToolMismatch,
    ToolNotFound,
)
from .events import event_emit
from .models import Attempt, AuditEvent, Envelope, ProposedInput, Quarantine, SkippedResource, Step, Tool
from .presenters import decision_representation, decisions_prefetch, step_representation
from .proposal import AcceptedInput, Proposal, input_accept, proposal_remember
from .redaction import redact_body, redact_json
from .rfc3339 import rfc3339
from .transitions import (
    AGENT,
    SYSTEM,
    Plan,
    StepContext,
    ToolUnknown,
    apply_event,
    code_is_documented,
    on_step_race,
    step_context,
    tool_auto_register,
    tool_get_or_register,
)

__all__ = [
    "AttemptRefused",
    "EnvelopeInvalid",
    "HoldpointError",
    "StepNotFound",
    "ToolLimitReached",
    "ToolMismatch",
    "ToolNotFound",
    "tool_get_or_register",
]

QUARANTINE_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class IngestAnswer:
    envelope: Envelope
    step: Step
    directive_reason: str
    directive_not_before: datetime | None
    dropped_detail_keys: tuple[str, ...]
    flags: tuple[str, ...]
    # The step's shape as its step.state_changed event carried it (transitions.plan_write builds it once).
    step_shape: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        step = step_representation(
            self.step,
            directive_reason=self.directive_reason,
            directive_not_before=self.directive_not_before,
            built=self.step_shape,
        )
        return {
            "envelope_id": self.envelope.pk,
            "correlation_id": self.envelope.correlation_id,
            "step": step,
            "directive": step["directive"],
            "dropped_detail_keys": list(self.dropped_detail_keys),
            "flags": list(self.flags),
        }


def _quarantine_body(raw_body: bytes) -> str:
    """The body as decoded values, redacted (a secret written with JSON escapes is a secret too),
    cut after redaction so that a cut never leaves half a secret unrecognised."""
    return redact_body(raw_body).text[:QUARANTINE_BODY_LIMIT]


def envelope_quarantine(
    *,
    team: Team,
    tool_name: str | None,
    operation_ref: str | None,
    code: str,
    errors: list[dict[str, Any]],
    raw_body: bytes,
    now: datetime | None = None,
) -> Quarantine:
    """Keep a payload that broke the contract and escalate the step it names."""
    now = now or timezone.now()

    def work() -> Quarantine:
        tool = tool_auto_register(team=team, name=tool_name) if tool_name else None
        step = None
        if tool is not None and operation_ref:
            try:
                step = apply_event(
                    team=team,
                    tool=tool,
                    operation_ref=operation_ref,
                    event=lifecycle.EnvelopeRejected(),
                    actor=AGENT,
                    cause="malformed_envelope",
                    now=now,
                ).step
            except ToolMismatch:
                step = None
        return Quarantine.objects.create(
            team=team,
            tool=tool,
            tool_name=tool_name or "",
            operation_ref=operation_ref or "",
            step=step,
            code=code,
            errors=errors,
            body=_quarantine_body(raw_body),
            received_at=now,
        )

    return on_step_race(work)


def _rejected(team: Team, rejected: schema.EnvelopeRejected, raw_body: bytes, now: datetime) -> EnvelopeInvalid:
    invalid = EnvelopeInvalid(rejected)
    envelope_quarantine(
        team=team,
        tool_name=rejected.tool,
        operation_ref=rejected.operation_ref,
        code=invalid.code,
        errors=invalid.errors,
        raw_body=raw_body,
        now=now,
    )
    return invalid


class _Rejected(Exception):
    """An envelope the contract refuses, found in the ingest's transaction: it is left (nothing
    was written) and the payload quarantined in a transaction of its own."""

    def __init__(self, rejected: schema.EnvelopeRejected) -> None:
        super().__init__(rejected.code)
        self.rejected = rejected


def envelope_ingest(
    *, team: Team, payload: Any, dialect: str, raw_body: bytes, now: datetime | None = None
) -> IngestAnswer:
    """Validate, redact and store one envelope, and move its step (contract §2, §3)."""
    now = now or timezone.now()
    try:
        return on_step_race(lambda: _ingest(team, payload, dialect, now), team=team)
    except _Rejected as rejected:
        raise _rejected(team, rejected.rejected, raw_body, now) from rejected.rejected
    except ToolMismatch:
        envelope_quarantine(
            team=team,
            tool_name=None,
            operation_ref=None,
            code="tool_mismatch",
            errors=[{"field": "tool", "rule": "tool_mismatch"}],
            raw_body=raw_body,
            now=now,
        )
        raise


def _ingest(team: Team, payload: Any, dialect: str, now: datetime) -> IngestAnswer:
    """One ingest in the caller's transaction: the step's context (registering a tool named for
    the first time), the parse, the plan with the envelope's row, the write, then the circuit or
    the skipped resource an error of that scope opens."""
    tool_name, operation_ref = schema.identify(payload, dialect)
    code = payload.get("code") if isinstance(payload, dict) else None
    # The catalog is asked for the code as sent; one that breaks its pattern (a NUL in it, which
    # PostgreSQL refuses as a parameter) is the parse's to reject.
    code = code if isinstance(code, str) and re.fullmatch(schema.CODE_PATTERN, code) else ""
    context: StepContext | None = None
    tool = None
    if tool_name and operation_ref:
        context = step_context(team=team, tool_name=tool_name, operation_ref=operation_ref, code=code, ingest=True)
        if context is None:
            raise ToolUnknown(tool_name)
        tool = context.tool
    elif tool_name:
        tool = tool_auto_register(team=team, name=tool_name)
    step = context.step if context else None
    schema_context = schema.ToolContext(
        max_attempts=tool.max_attempts if tool else 3,
        side_effects=tool.side_effects if tool else True,
        attempts_so_far=step.attempts if step is not None and dialect == "compact" else 0,
        safe_detail_keys=frozenset(tool.safe_detail_keys) if tool else frozenset(),
    )
    try:
        parsed = schema.parse_envelope(payload, dialect=dialect, context=schema_context, received_at=now)
    except schema.EnvelopeRejected as rejected:
        raise _Rejected(rejected) from rejected
    assert tool is not None and context is not None

    flags = set(parsed.flags)
    documented = True
    if not parsed.ok:
        same_code = (parsed.code or "") == code
        documented = context.documented if same_code else code_is_documented(tool=tool, code=parsed.code or "")
        if not documented:
            if tool.strict_codes:
                raise _Rejected(
                    schema.EnvelopeRejected(
                        code="undocumented_code",
                        errors=(schema.FieldError("code", "documented"),),
                        tool=parsed.tool,
                        operation_ref=parsed.operation_ref,
                        detail=f"{parsed.code} is not in the catalog of {tool.name}, which refuses undocumented codes.",
                    )
                )
            flags.add("undocumented_code")

    correlation_id = parsed.correlation_id or str(uuid.uuid4())

    def envelope_row(plan: Plan) -> list[Any]:
        assert plan.step is not None  # only an attempt is refused before its step exists
        envelope = envelope_build(
            parsed,
            team=team,
            tool=tool,
            step=plan.step,
            correlation_id=correlation_id,
            flags=flags,
            documented=documented,
            step_closed=plan.outcome.ignored,
            now=now,
        )
        envelope.id = context.envelope_id  # numbered by the context read (None: by its INSERT)
        if not plan.outcome.ignored:
            plan.step.last_envelope = envelope
        return [envelope]  # a stored envelope is news on its step (updated_at), even a closed one's

    plan = apply_event(
        context=context,
        event=envelope_event(parsed, tool),
        actor=AGENT,
        cause="envelope",
        now=now,
        correlation_id=correlation_id,
        run_id=parsed.run_id or "",
        rows=envelope_row,
    )
    step, (envelope,) = plan.step, plan.rows
    assert step is not None and isinstance(envelope, Envelope)
    shape = plan.step_shape
    if not parsed.ok and not plan.outcome.ignored:
        if parsed.scope == "service":
            _tool_halt(tool, envelope=envelope, now=now)
            shape = None  # the tool changed after the event
        elif parsed.scope == "resource" and (parsed.run_id or step.run_id):
            SkippedResource.objects.create(
                team=team,
                run_id=parsed.run_id or step.run_id,
                resource_id=parsed.resource_id or "",
                correlation_id=correlation_id,
                code=parsed.code or "",
                operation_ref=step.operation_ref,
                envelope=envelope,
                occurred_at=parsed.occurred_at,
            )
    return IngestAnswer(
        envelope=envelope,
        step=step,
        directive_reason=plan.outcome.directive_reason,
        directive_not_before=plan.outcome.directive_not_before,
        dropped_detail_keys=parsed.dropped_detail_keys,
        flags=tuple(sorted(flags)),
        step_shape=shape,
    )


def envelope_event(parsed: schema.ParsedEnvelope, tool: Tool) -> lifecycle.EnvelopeArrived:
    """What the state machine is told of an envelope for this tool (the service and the hot path)."""
    return lifecycle.EnvelopeArrived(
        ok=parsed.ok,
        commit_state=parsed.commit_state,
        next_action=parsed.next_action,
        max_attempts_remaining=parsed.max_attempts_remaining,
        not_before=parsed.not_before,
        attempt=parsed.attempt,
        occurred_at=parsed.occurred_at,
        consistency_window_s=tool.consistency_window_s,
        verification_deadline_s=tool.verification_deadline_s,
        approval_ttl_s=tool.approval_ttl_s,
    )


def attempt_event(fingerprint: str, tool: Tool) -> lifecycle.AttemptRequested:
    """What the state machine is told of an attempt request for this tool."""
    return lifecycle.AttemptRequested(
        fingerprint=fingerprint,
        consistency_window_s=tool.consistency_window_s,
        verification_deadline_s=tool.verification_deadline_s,
        approval_ttl_s=tool.approval_ttl_s,
    )


def envelope_build(
    parsed: schema.ParsedEnvelope,
    *,
    team: Team,
    tool: Tool,
    step: Step,
    correlation_id: str,
    flags: set[str],
    documented: bool,
    step_closed: bool,
    now: datetime,
) -> Envelope:
    """The stored row of a parsed envelope, not saved (the service saves it; the hot path writes it
    in its one statement)."""
    return Envelope(
        team=team,
        tool=tool,
        step=step,
        dialect=parsed.dialect,
        ok=parsed.ok,
        code=parsed.code or "",
        category=parsed.category or "",
        commit_state=parsed.commit_state or "",
        retry_directive=parsed.retry_directive or "",
        not_before=parsed.not_before,
        max_attempts_remaining=parsed.max_attempts_remaining,
        next_action=parsed.next_action or "",
        scope=parsed.scope or "",
        resource_id=parsed.resource_id or "",
        safe_details=parsed.safe_details,
        dropped_detail_keys=list(parsed.dropped_detail_keys),
        agent_message=parsed.agent_message,
        user_message=parsed.user_message,
        correlation_id=correlation_id,
        run_id=parsed.run_id or "",
        attempt=parsed.attempt,
        occurred_at=parsed.occurred_at,
        received_at=now,
        verification=parsed.verification,
        result_sha256=parsed.result_sha256 or "",
        result_size=parsed.result_size,
        flags=sorted(flags),
        documented=documented,
        step_closed=step_closed,
    )


# --- the circuit of a tool -----------------------------------------------------------------------


def _tool_halt(tool: Tool, *, envelope: Envelope, now: datetime) -> None:
    locked = Tool.objects.select_for_update().get(pk=tool.pk)
    until = envelope.not_before or (now + timedelta(seconds=locked.halt_cooldown_s))
    if until <= now:
        until = now + timedelta(seconds=locked.halt_cooldown_s)
    was_halted = locked.is_halted(now)
    if was_halted and locked.halted_until and locked.halted_until >= until:
        return
    locked.halted_until = until
    locked.halted_reason = envelope.code
    if not was_halted:
        locked.halted_at = now
    audit_append(
        holder=locked,
        kind=AuditEvent.Kind.CIRCUIT,
        actor=AGENT,
        reason="halted",
        data={"code": envelope.code, "until": rfc3339(until), "envelope_id": envelope.pk},
        now=now,
    )
    locked.save()
    tool.halted_until, tool.halted_reason, tool.halted_at = until, locked.halted_reason, locked.halted_at
    if not was_halted:
        event_emit(
            team_id=tool.team_id,
            event_type="tool.halted",
            data={"tool": tool.name, "reason": envelope.code, "until": rfc3339(until), "reviewer": None},
        )


@transaction.atomic
def tool_resume(*, tool: Tool, actor: str, reviewer: str | None, reason: str, now: datetime | None = None) -> Tool:
    """Close a tool's circuit: by a reviewer, or by the sweep once its time has passed."""
    now = now or timezone.now()
    locked = Tool.objects.select_for_update().get(pk=tool.pk)
    if locked.halted_until is None:
        return locked
    if reviewer is None and locked.halted_until > now:
        return locked  # the sweep raced a new halt
    locked.halted_until = None
    audit_append(
        holder=locked, kind=AuditEvent.Kind.CIRCUIT, actor=actor, reason="resumed", data={"why": reason}, now=now
    )
    locked.save()
    event_emit(
        team_id=locked.team_id,
        event_type="tool.resumed",
        data={"tool": locked.name, "reason": reason, "until": None, "reviewer": reviewer},
    )
    return locked


# --- the attempt gate -------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptGrant:
    attempt: Attempt
    step: Step
    step_shape: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # as IngestAnswer's

    def as_dict(self) -> dict[str, Any]:
        step = step_representation(self.step, built=self.step_shape)
        return {"attempt": self.attempt.number, "step": step, "directive": step["directive"]}


REFUSAL_DETAIL = {
    "verification_required": (
        "The outcome of an earlier attempt is unknown: verify it by operation_ref before any new write."
    ),
    "already_committed": "This step already committed; writing again would duplicate it.",
    "identical_retry": "The input is unchanged since it was refused; fix the input before retrying.",
    "retry_not_before": "Retrying is not allowed yet; wait until not_before.",
    "approval_pending": "This step waits for a reviewer's approval.",
    "approval_mismatch": "The approval covers another input; the step waits for approval again.",
    "escalated": "This step is escalated to a human.",
    "step_closed": "This step is closed.",
    "tool_halted": "The tool is halted after a service-wide failure.",
    "attempt_budget_exhausted": "This step has used all its attempts.",
}


def attempt_request(
    *,
    team: Team,
    operation_ref: str,
    tool_name: str,
    fingerprint: str,
    input: Any = None,
    run_id: str = "",
    correlation_id: str = "",
    now: datetime | None = None,
) -> AttemptGrant:
    """The attempt gate: grant one write, or raise AttemptRefused (contract §4).

    `input` (optional, the tool call's input) is checked and must hash to `fingerprint`
    (InputInvalid, FingerprintMismatch: nothing is stored); it is stored redacted on the
    granted attempt, or, when the gate refuses it with `approval_mismatch`, as the input the
    step now waits to have approved (ProposedInput). Other refusals store no input: the step's
    binding, and so what a reviewer must read, did not change."""
    now = now or timezone.now()
    accepted = input_accept(input, fingerprint=fingerprint) if input is not None else None

    def attempt_rows(plan: Plan) -> list[Any]:
        step, outcome = plan.step, plan.outcome
        assert step is not None
        stored_input = accepted.stored if accepted else None
        redacted = accepted.redacted if accepted else False
        if outcome.granted:
            attempt = Attempt(
                step=step,
                number=step.attempts,
                fingerprint=fingerprint,
                run_id=run_id,
                correlation_id=correlation_id,
                granted_at=now,
                input=stored_input,
                input_redacted=redacted,
            )
            proposal_remember(step, _proposal(attempt.number, fingerprint, accepted, now))
            return [attempt]
        if outcome.refusal == "approval_mismatch":
            proposal_remember(step, _proposal(None, fingerprint, accepted, now))
            return [
                ProposedInput(
                    step=step, fingerprint=fingerprint, input=stored_input, input_redacted=redacted, proposed_at=now
                )
            ]
        return []

    def work() -> Plan:
        context = step_context(team=team, tool_name=tool_name, operation_ref=operation_ref)
        if context is None:
            raise ToolUnknown(tool_name)
        assert context.tool is not None
        return apply_event(
            context=context,
            event=attempt_event(fingerprint, context.tool),
            actor=AGENT,
            cause="attempt",
            now=now,
            correlation_id=correlation_id,
            run_id=run_id,
            rows=attempt_rows,
        )

    plan = on_step_race(work, team=team)
    step, outcome = plan.step, plan.outcome
    if step is None:
        raise AttemptRefused(
            outcome.refusal,
            REFUSAL_DETAIL[outcome.refusal],
            step=None,
            directive=lifecycle.directive(outcome.after, reason=outcome.refusal, not_before=outcome.retry_after)
            | {"not_before": rfc3339(outcome.retry_after)},
            retry_after=outcome.retry_after,
        )
    if outcome.refusal:
        raise AttemptRefused(
            outcome.refusal,
            REFUSAL_DETAIL[outcome.refusal],
            step=step,
            directive=step_representation(
                step,
                directive_reason=outcome.directive_reason,
                directive_not_before=outcome.directive_not_before,
                built=plan.step_shape,
            )["directive"],
            retry_after=outcome.retry_after,
        )
    (attempt,) = plan.rows
    assert isinstance(attempt, Attempt)
    return AttemptGrant(attempt=attempt, step=step, step_shape=plan.step_shape)


def _proposal(number: int | None, fingerprint: str, accepted: AcceptedInput | None, now: datetime) -> Proposal:
    return Proposal(
        attempt=number,
        input_fingerprint=fingerprint,
        input=accepted.stored if accepted else None,
        input_redacted=accepted.redacted if accepted else False,
        proposed_at=now,
    )


# --- verification ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StepAnswer:
    step: Step
    directive_reason: str = ""
    directive_not_before: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        step = step_representation(
            self.step, directive_reason=self.directive_reason, directive_not_before=self.directive_not_before
        )
        return {"step": step, "directive": step["directive"]}


def verification_report(
    *,
    team: Team,
    operation_ref: str,
    outcome: str,
    checked_at: datetime,
    evidence_ref: str = "",
    now: datetime | None = None,
) -> StepAnswer:
    """A lookup of the step's write by operation_ref (contract §3)."""
    now = now or timezone.now()
    data = {"outcome": outcome, "checked_at": rfc3339(checked_at)}
    if evidence_ref:
        # Often JSON-ish (`{"row": ..., "dsn": ...}`): redacted as decoded values, like a body.
        data["evidence_ref"] = redact_json(evidence_ref, credential_keys=True)[0]
    with transaction.atomic():
        applied = apply_event(
            team=team,
            operation_ref=operation_ref,
            must_exist=True,
            event=lifecycle.VerificationReported(outcome=outcome),
            actor=AGENT,
            cause="verification",
            now=now,
            data=data,
        )
    assert applied.step is not None
    return StepAnswer(
        step=applied.step,
        directive_reason=applied.outcome.directive_reason,
        directive_not_before=applied.outcome.directive_not_before,
    )


# --- timers ------------------------------------------------------------------------------------


def step_fire_timer(*, step_id: int, now: datetime | None = None) -> bool:
    """Fire the due timer of one step, if it is still due. True when it moved the step."""
    now = now or timezone.now()
    with transaction.atomic():
        step = (
            Step.objects.select_related("tool")
            .select_for_update(of=("self",), skip_locked=True)
            .filter(pk=step_id, due_at__lte=now)
            .first()
        )
        if step is None:
            return False  # not due, gone, or another sweeper has it
        # One timer per call: the approval's lapse first, else the state's (Snapshot.due_timer).
        # After it, due_at is the other one's time, for a later sweep.
        snapshot = step.snapshot()
        timer = snapshot.due_timer(now)
        if timer is None:
            # A stale column: no act for the machine, the plan only sets what the step waits on now.
            apply_event(step=step, event=None, actor=SYSTEM, cause="timer", now=now)
            return False
        applied = apply_event(
            step=step,
            event=lifecycle.TimerFired(timer=timer),
            actor=SYSTEM,
            cause="timer",
            now=now,
            data={"timer": timer},
        )
    return applied.outcome.changed


def due_step_ids(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    now = now or timezone.now()
    return list(Step.objects.due(now).order_by("due_at").values_list("pk", flat=True)[:limit])


def due_tools_resume(*, now: datetime | None = None) -> int:
    """Close circuits whose time has passed; returns how many."""
    now = now or timezone.now()
    resumed = 0
    for tool in Tool.objects.filter(halted_until__lte=now):
        if tool_resume(tool=tool, actor=SYSTEM, reviewer=None, reason="cooldown_elapsed", now=now).halted_until is None:
            resumed += 1
    return resumed


# --- reviewer acts (called by approvals.services) ---------------------------------------------


def step_lock_for_decision(*, team: Team, step_id: int) -> Step:
    step = (
        Step.objects.select_related("tool", "last_envelope")
        .select_for_update(of=("self",))
        .filter(team=team, pk=step_id)
        .first()
    )
    if step is None:
        raise StepNotFound("No such step in this team.")
    return step


def step_decision_apply(
    *,
    step: Step,
    decision: Any,
    final: bool,
    actor: str,
    now: datetime,
    edited: bool = False,
) -> bool:
    """A reviewer's decision (an unsaved Decision of the reviewers' app) on a step the caller
    locked (`step_lock_for_decision`), applied as one plan: the decision's row and audit link
    and, when it is final, the act fed to the machine, then `step.decided`. A decision that is
    not final yet (the first of two approvals) moves nothing. An approval's `input_fingerprint`
    is the input it approved; `edited`: a reviewer's own input, whose fingerprint the step then
    binds (§3). True when the step moved."""
    decision.pk = modelsql.next_id(type(decision))  # named by the audit links' hash
    action, fingerprint = decision.action, decision.input_fingerprint or None
    link: dict[str, Any] = {"reason": decision.reason}
    if action == "approve":
        link |= {"input_fingerprint": fingerprint, "edited": edited}
    _decisions_with(step, decision)

    def decision_link(step: Step) -> list[AuditEvent]:
        return [
            audit_link(
                holder=step,
                kind=AuditEvent.Kind.DECISION,
                actor=actor,
                before=step.state,
                after=step.state,
                reason=action,
                data=link,
                now=now,
            )
        ]

    plan = apply_event(
        step=step,
        event=(
            lifecycle.ReviewerActed(
                action=action, fingerprint=fingerprint if edited else None, approval_ttl_s=step.tool.approval_ttl_s
            )
            if final
            else None
        ),
        actor=actor,
        cause="decision",
        now=now,
        data={"decision_id": decision.pk},
        links=decision_link,
        rows=lambda plan: [decision],
        announce=lambda plan: [
            ("step.decided", lambda: {"step": step_representation(step), "decision": decision_representation(decision)})
        ],
    )
    return plan.outcome.changed


def _decisions_with(step: Step, decision: Any) -> None:
    """What the step's decisions read from now on: the earlier ones and this one, not written yet
    (the events of the same write carry the step with it)."""
    cache = getattr(step, "_prefetched_objects_cache", {})
    if "decisions" not in cache:
        prefetch_related_objects([step], decisions_prefetch())
    decisions = [*step.decisions.all(), decision]  # type: ignore[attr-defined]
    listed = type(decision)._default_manager.none()
    listed._result_cache = decisions
    step._prefetched_objects_cache["decisions"] = listed  # type: ignore[attr-defined]
