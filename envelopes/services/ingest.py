"""The envelopes an agent reports (contract §2, §3): the ingest, the quarantine of a payload
that broke the contract, and the row and event an envelope makes (shared with the hot path)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from accounts.models import ApiKey, Team
from telemetry.traceparent import incoming_trace_id

from .. import lifecycle, policy_acts, schema
from ..errors import EnvelopeInvalid, ToolMismatch
from ..models import Envelope, Quarantine, SkippedResource, Step, Tool
from ..presenters import step_representation
from ..redaction import redact_body
from ..step_context import StepContext, ToolUnknown, code_is_documented, step_context, tool_auto_register
from ..transitions import AGENT, Plan, apply_event, on_step_race
from .circuits import tool_halt
from .policy_holds import hold_act

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
    *,
    team: Team,
    payload: Any,
    dialect: str,
    raw_body: bytes,
    now: datetime | None = None,
    api_key: ApiKey | None = None,
) -> IngestAnswer:
    """Validate, redact and store one envelope, and move its step (contract §2, §3); a step sent
    to a reviewer is put to the team's rules (§11; `api_key` the caller's, for their facts)."""
    now = now or timezone.now()
    try:
        return on_step_race(lambda: _ingest(team, payload, dialect, now, api_key), team=team)
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


def _ingest(team: Team, payload: Any, dialect: str, now: datetime, api_key: ApiKey | None = None) -> IngestAnswer:
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

    # The team's rules, asked when the envelope sends the step to a reviewer (§11).
    consult = policy_acts.consult_for(
        rule_versions=context.rule_versions,
        grant_uses=context.grant_uses,
        tool=tool.name,
        input=None,
        has_input=False,
        run_id=parsed.run_id or "",
        api_key=api_key,
        now=now,
        at_gate=False,
    )
    plan = apply_event(
        context=context,
        event=envelope_event(parsed, tool),
        actor=AGENT,
        cause="envelope",
        now=now,
        correlation_id=correlation_id,
        run_id=parsed.run_id or "",
        rows=envelope_row,
        policy=consult,
    )
    step, envelope = plan.step, plan.rows[0]
    assert step is not None and isinstance(envelope, Envelope)
    shape = plan.step_shape
    if hold_act(step=step, consult=consult, now=now):
        shape = None  # a rule or grant moved the step again
    if not parsed.ok and not plan.outcome.ignored:
        if parsed.scope == "service":
            tool_halt(tool, envelope=envelope, now=now)
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
        trace_id=incoming_trace_id(),
    )
