"""The core's trace context (contract §13): the agent's trace kept on the step, and the spans of
the gate and of transitions (telemetry.spans: no-ops without an OTLP endpoint)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from telemetry import spans
from telemetry.traceparent import incoming

from .models import AuditEvent, Step

if TYPE_CHECKING:
    from .transitions import Plan


def step_trace_fill(step: Step) -> bool:
    """Keep the current request's trace on the step (the latest call's wins); whether it changed.
    Written with the step, in the writer's one statement."""
    trace = incoming()
    if trace is None or (step.trace_id, step.trace_parent_id) == (trace.trace_id, trace.parent_id):
        return False
    step.trace_id, step.trace_parent_id = trace.trace_id, trace.parent_id
    return True


def gate_span_record(span: Any, plan: Plan, consult: Any) -> None:
    """The gate's verdict on its span: "granted" or the refusal's code, and the rule that decided
    when one did (`policy_acts.PolicyConsult`'s verdict; a grant's is not a rule's)."""
    if span is spans.NOOP:
        return
    verdict = consult.verdict if consult is not None else None
    rule = verdict.rule if verdict is not None and verdict.effect is not None and verdict.grant is None else None
    spans.gate_verdict_record(
        span,
        verdict=plan.outcome.refusal or "granted",
        rule=(rule.name, rule.version) if rule is not None else None,
    )


def transition_span_start(*, cause: str, actor: str) -> Any:
    return spans.span_start("holdpoint.transition", {spans.CAUSE: cause, spans.ACTOR: actor})


def transition_span_end(span: Any, plan: Plan) -> None:
    """End a transition's span with what the plan did: the step, its states, the refusal."""
    if span is spans.NOOP:
        return
    step = plan.step
    if step is not None:
        span.set_attributes(
            {spans.STEP_REF: step.operation_ref, spans.STATE_AFTER: step.state, spans.REASON: step.reason}
        )
    for link in plan.audit_events:
        if link.kind == AuditEvent.Kind.TRANSITION:
            span.set_attribute(spans.STATE_BEFORE, link.before)
        elif link.kind == AuditEvent.Kind.REFUSAL:
            span.set_attribute(spans.VERDICT, link.reason)
    span.set_attribute("holdpoint.step.changed", plan.outcome.changed)
    span.end()


def step_traces(step_ids: list[int | None]) -> list[tuple[str, str]]:
    """The (trace_id, parent_id) the steps keep, for the worker's spans to link to (one read,
    made only when spans are exported: `spans.worker_span` calls it then)."""
    ids = [pk for pk in step_ids if pk is not None]
    if not ids:
        return []
    rows = Step.objects.filter(pk__in=ids).exclude(trace_id="").values_list("trace_id", "trace_parent_id")
    return [(trace_id, parent_id) for trace_id, parent_id in rows]
