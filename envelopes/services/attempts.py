"""The attempt gate (contract §4): grant one write of a step, or refuse it with a reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from accounts.models import Team
from telemetry import spans
from telemetry.traceparent import incoming_trace_id

from .. import lifecycle
from ..errors import AttemptRefused
from ..models import Attempt, ProposedInput, Step, Tool
from ..presenters import step_representation
from ..proposal import AcceptedInput, Proposal, input_accept, proposal_remember
from ..rfc3339 import rfc3339
from ..transitions import AGENT, Plan, ToolUnknown, apply_event, on_step_race, step_context


def attempt_event(fingerprint: str, tool: Tool) -> lifecycle.AttemptRequested:
    """What the state machine is told of an attempt request for this tool."""
    return lifecycle.AttemptRequested(
        fingerprint=fingerprint,
        consistency_window_s=tool.consistency_window_s,
        verification_deadline_s=tool.verification_deadline_s,
        approval_ttl_s=tool.approval_ttl_s,
    )


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
                trace_id=incoming_trace_id(),
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

    with spans.span("holdpoint.gate", {spans.STEP_REF: operation_ref, spans.STEP_TOOL: tool_name}) as span:
        plan = on_step_race(work, team=team)
        # Issue 25's rules: pass `rule=(name, version)` of the rule that decided, when one did.
        spans.gate_verdict_record(span, verdict=plan.outcome.refusal or "granted")
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
