"""The acts on a step other than its envelopes and attempts: a verification report, a due
timer, and a reviewer's decision (called by approvals.services)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import prefetch_related_objects
from django.utils import timezone

from accounts.models import Team

from .. import lifecycle, modelsql
from ..audit import audit_link
from ..errors import StepNotFound
from ..events import APPROVERS_ESCALATED
from ..models import AuditEvent, Step
from ..presenters import decision_representation, decisions_prefetch, step_representation
from ..receipts import decision_sign
from ..redaction import redact_json
from ..rfc3339 import rfc3339
from ..states import State
from ..transitions import AGENT, SYSTEM, apply_event


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


def _claim_due(step_id: int, **due: datetime) -> Step | None:
    """The step, locked, if it is still due; None when it is not, is gone, or another sweeper
    has it (SKIP LOCKED: sweepers never fire one timer twice)."""
    return (
        Step.objects.select_related("tool")
        .select_for_update(of=("self",), skip_locked=True)
        .filter(pk=step_id, **due)
        .first()
    )


def step_fire_timer(*, step_id: int, now: datetime | None = None) -> bool:
    """Fire the due timer of one step, if it is still due. True when it moved the step."""
    now = now or timezone.now()
    with transaction.atomic():
        step = _claim_due(step_id, due_at__lte=now)
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
            event=lifecycle.TimerFired(timer=timer, on_expiry=step.tool.on_approval_expiry),
            actor=SYSTEM,
            cause="timer",
            now=now,
            data={"timer": timer},
        )
    return applied.outcome.changed


def due_step_ids(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    now = now or timezone.now()
    return list(Step.objects.due(now).order_by("due_at").values_list("pk", flat=True)[:limit])


def step_escalate_approvers(*, step_id: int, now: datetime | None = None) -> bool:
    """Widen who may decide a request for approval that waited its tool's escalate_after_s
    (contract §12): the tool's escalate_to group may now decide it too, and its channels are told.
    Nothing is decided by time. True when it widened the step."""
    now = now or timezone.now()
    with transaction.atomic():
        step = _claim_due(step_id, escalation_due_at__lte=now)
        if step is None:
            return False  # not due, gone, or another sweeper has it
        group, after = step.tool.escalate_to, step.tool.escalate_after_s
        widens = step.state == State.AWAITING_APPROVAL and bool(group)

        def widened(locked: Step) -> list[AuditEvent]:
            locked.escalation_due_at = None
            if not widens:
                return []  # a stale column (the tool stopped escalating): only it is rewritten
            locked.escalated_to = group
            return [
                audit_link(
                    holder=locked,
                    kind=AuditEvent.Kind.ESCALATION,
                    actor=SYSTEM,
                    before=locked.state,
                    after=locked.state,
                    reason="approvers_escalated",
                    data={"group": group, "after_s": after},
                    now=now,
                )
            ]

        apply_event(
            step=step,
            event=None,
            actor=SYSTEM,
            cause="escalation",
            now=now,
            links=widened,
            announce=lambda plan: (
                [(APPROVERS_ESCALATED, lambda: escalation_data(step, group, after))] if widens else []
            ),
        )
    return widens


def escalation_data(step: Step, group: str, after: int | None) -> dict[str, Any]:
    """The escalation event's body: the step, the group, and the entry it widened (its notices
    are of that entry)."""
    return {
        "step": step_representation(step),
        "group": group,
        "after_s": after,
        "entered_at": rfc3339(step.state_entered_at),
    }


def due_escalation_ids(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    now = now or timezone.now()
    due = Step.objects.filter(escalation_due_at__lte=now).order_by("escalation_due_at")
    return list(due.values_list("pk", flat=True)[:limit])


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
    step.team = team  # its receipt names the team: no query for it
    return step


def step_decision_apply(
    *,
    step: Step,
    decision: Any,
    final: bool,
    actor: str,
    now: datetime,
    edited: bool = False,
    approved_reason: str = "",
    policy_data: dict[str, Any] | None = None,
    policy_rows: tuple[Any, ...] = (),
    policy: Any = None,
) -> bool:
    """A reviewer's decision (an unsaved Decision of the reviewers' app) on a step the caller
    locked (`step_lock_for_decision`), applied as one plan: the decision's row and audit link
    and, when it is final, the act fed to the machine, then `step.decided`. A decision that is
    not final yet (the first of two approvals) moves nothing. An approval's `input_fingerprint`
    is the input it approved; `edited`: a reviewer's own input, whose fingerprint the step then
    binds (§3). A rule's or grant's approval (§11, `services.policy_holds`) gives the step its
    `approved_reason`, its audit link `policy_data` and its rows `policy_rows`; `policy` (a
    `policy_acts.PolicyConsult`) asks the team's rules of a step the act sends back to review.
    True when the step moved."""
    decision.pk = modelsql.next_id(type(decision))  # named by the audit links' hash
    action, fingerprint = decision.action, decision.input_fingerprint or None
    link: dict[str, Any] = {"reason": decision.reason, **(policy_data or {})}
    if action == "approve":
        link |= {"input_fingerprint": fingerprint, "edited": edited}
    if getattr(decision, "on_behalf_of_id", None):  # a delegate decided for an away member (§12)
        link["on_behalf_of"] = decision.on_behalf_of.get_username()
    # Every decision is signed here, the one path they all take; its link carries the receipt, so
    # the chain covers it and the audit export can be checked against the JWKS (§13).
    link["receipt"] = decision_sign(step=step, decision=decision, actor=actor)
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
                action=action,
                fingerprint=fingerprint if edited else None,
                approval_ttl_s=step.tool.approval_ttl_s,
                reason=approved_reason,
            )
            if final
            else None
        ),
        actor=actor,
        cause="decision",
        now=now,
        data={"decision_id": decision.pk},
        links=decision_link,
        rows=lambda plan: [decision, *policy_rows],
        policy=policy,
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
