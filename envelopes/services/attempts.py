"""The attempt gate (contract §4): grant one write of a step, or refuse it with a reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from accounts.models import ApiKey, Team
from telemetry import spans
from telemetry.traceparent import incoming_trace_id

from .. import lifecycle, modelsql, policy_acts
from ..errors import AttemptRefused
from ..models import Attempt, ProposedInput, Step, Tool
from ..presenters import step_representation
from ..proposal import AcceptedInput, Proposal, input_accept, proposal_remember
from ..rfc3339 import rfc3339
from ..step_context import ToolUnknown, step_context
from ..tracing import gate_span_record
from ..transitions import AGENT, Plan, apply_event, on_step_race
from .policy_holds import hold_act


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
    "denied_by_rule": "A rule of this team refuses this input; change the input.",
    "approval_required": "A rule of this team asks a reviewer to approve this input first.",
}


_BY_RULE = frozenset({"denied_by_rule", "approval_required"})


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
    api_key: ApiKey | None = None,
) -> AttemptGrant:
    """The attempt gate: grant one write, or raise AttemptRefused (contract §4).

    `input` (optional, the tool call's input) is checked and must hash to `fingerprint`
    (InputInvalid, FingerprintMismatch: nothing is stored); it is stored redacted on the
    granted attempt, or, when the gate refuses it with `approval_mismatch`, as the input the
    step now waits to have approved (ProposedInput). Other refusals store no input: the step's
    binding, and so what a reviewer must read, did not change.

    The team's rules and grants (contract §11) are asked of a call the machine would grant
    (`policy_acts.PolicyConsult`; `api_key` is the caller's, for a grant's scope and the `key`
    variable), and of an input that goes back to a reviewer (`policy_holds.hold_act`: when a
    grant or rule approves it at once, this same call is granted with that approval)."""
    now = now or timezone.now()
    accepted = input_accept(input, fingerprint=fingerprint) if input is not None else None
    stored_input = accepted.stored if accepted else None
    consults: list[policy_acts.PolicyConsult] = []

    def attempt_rows(plan: Plan) -> list[Any]:
        step, outcome = plan.step, plan.outcome
        assert step is not None
        redacted = accepted.redacted if accepted else False
        if api_key is not None and plan.changed:
            step.last_key_id = api_key.pk
        if outcome.granted:
            verdict = consults[-1].verdict if consults else None
            grant = verdict.grant if verdict is not None else None
            attempt = modelsql.new(
                Attempt,
                step=step,
                number=step.attempts,
                fingerprint=fingerprint,
                run_id=run_id,
                correlation_id=correlation_id,
                granted_at=now,
                input=stored_input,
                input_redacted=redacted,
                grant={"id": grant.pk, "created_by": grant.created_by} if grant is not None else None,
                trace_id=incoming_trace_id(),
            )
            proposal_remember(step, _proposal(attempt.number, fingerprint, accepted, now))
            return [attempt]
        if outcome.refusal in ("approval_mismatch", "approval_required"):  # the input a reviewer now reads
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
        consult = policy_acts.consult_for(
            rule_versions=context.rule_versions,
            grant_uses=context.grant_uses,
            tool=tool_name,
            input=stored_input,
            has_input=accepted is not None,
            run_id=run_id,
            api_key=api_key,
            now=now,
            at_gate=True,
        )
        consults[:] = [consult]
        event = attempt_event(fingerprint, context.tool)
        plan = apply_event(
            context=context,
            event=event,
            actor=AGENT,
            cause="attempt",
            now=now,
            correlation_id=correlation_id,
            run_id=run_id,
            rows=attempt_rows,
            policy=consult,
        )
        if not hold_act(step=plan.step, consult=consult, now=now):
            return plan
        assert plan.step is not None
        plan.step_shape = None  # a rule or grant moved the step again
        if plan.step.state != lifecycle.State.RETRY_READY.value:
            return plan  # denied: the refusal below says so
        # A grant or rule approved the input at once: this call is the one that uses the approval.
        consults[:] = []
        return apply_event(
            step=plan.step,
            tool=context.tool,
            event=event,
            actor=AGENT,
            cause="attempt",
            now=now,
            correlation_id=correlation_id,
            run_id=run_id,
            rows=attempt_rows,
        )

    with spans.span("holdpoint.gate", {spans.STEP_REF: operation_ref, spans.STEP_TOOL: tool_name}) as span:
        plan = on_step_race(work, team=team)
        gate_span_record(span, plan, consults[-1] if consults else None)
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
    # A deny of the input sent back to review (policy_holds.hold_act) answers with its code.
    held_denied = outcome.refusal in ("approval_mismatch", "approval_pending") and step.reason == "denied_by_rule"
    if outcome.refusal or held_denied:
        consult = consults[-1] if consults else None
        code = "denied_by_rule" if held_denied else outcome.refusal
        verdict = (consult.verdict_on_hold if held_denied else consult.verdict) if consult is not None else None
        rule = verdict.rule if verdict is not None and verdict.grant is None else None
        raise AttemptRefused(
            code,
            REFUSAL_DETAIL[code],
            step=step,
            rule={"name": rule.name, "version": rule.version} if rule is not None and code in _BY_RULE else None,
            directive=step_representation(
                step,
                directive_reason=code if held_denied else outcome.directive_reason,
                directive_not_before=outcome.directive_not_before,
                built=plan.step_shape,
            )["directive"],
            retry_after=outcome.retry_after,
        )
    attempt = plan.rows[0]  # then what the grant did (policy_acts.PolicyConsult.rows)
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
