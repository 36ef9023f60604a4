"""What the team's rules do to a step that started waiting for approval for another reason than
a rule (contract §11, "Where rules act" 2): an enforced deny of the input under review sends it
back to the agent; on a step needing one approval, a live grant or an enforced allow approves it
at once, as a decision by that grant or rule through the reviewers' own path (audited,
`step.decided`; the notice of the hold is dropped, the step having left it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from policy.evaluation import ALLOW, DENY, GRANT
from policy.services import grant_use

from .. import lifecycle
from ..lifecycle import State
from ..models import Decision, Step
from ..policy_acts import PolicyConsult, act_row, audit_data_of, decided_by_of, policy_of
from ..transitions import apply_event
from .steps import step_decision_apply


def hold_act(*, step: Step | None, consult: PolicyConsult, now: datetime) -> bool:
    """Act on `step` (just written by a plan made with `consult`) as `consult.verdict_on_hold`
    says, in the caller's transaction. True when a rule or grant moved it (the caller's shape of
    the step is then stale)."""
    verdict = consult.verdict_on_hold
    if step is None or verdict is None or step.state != State.AWAITING_APPROVAL.value:
        return False
    actor = decided_by_of(verdict) if verdict.effect in (DENY, GRANT, ALLOW) else ""
    if verdict.effect == DENY:
        step.policy = policy_of(verdict, now)
        apply_event(
            step=step,
            event=lifecycle.RuleDenied(),
            actor=actor,
            cause="rule",
            now=now,
            data=audit_data_of(verdict),
            rows=lambda applied: [_act(verdict, step, consult, "denied_by_rule", now)],
        )
        return True
    if verdict.effect not in (GRANT, ALLOW) or step.approvals_required >= 2:
        return False  # nothing but reviewers releases a step needing two approvals
    if verdict.effect == GRANT and not grant_use(grant_id=verdict.grant.pk, now=now):
        return False  # its last use went to another call: a reviewer decides
    reason = "approved_by_grant" if verdict.effect == GRANT else "approved_by_rule"
    step.policy = policy_of(verdict, now)
    decision = Decision(
        step=step,
        reviewer=None,
        decided_by=actor,
        action=Decision.Action.APPROVE,
        decided_at=now,
        input_fingerprint=step.approval_fingerprint,
    )
    step_decision_apply(
        step=step,
        decision=decision,
        final=True,
        actor=actor,
        now=now,
        approved_reason=reason,
        policy_data=audit_data_of(verdict),
        policy_rows=(_act(verdict, step, consult, reason, now),),
    )
    return True


def _act(verdict: Any, step: Step, consult: PolicyConsult, outcome: str, now: datetime) -> Any:
    return act_row(verdict, team_id=step.team_id, tool=consult.tool, step_id=step.pk, outcome=outcome, now=now)
