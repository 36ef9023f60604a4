"""The receipt of a decision (contract §13): its claims, signed by `evidence` in the one
decision path (`services.steps.step_decision_apply`), whoever decided (a reviewer, a rule or a
grant) and through whichever door."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from evidence.receipts import receipt_sign

from .models import Decision, Step
from .rfc3339 import rfc3339


def decision_claims(*, step: Step, decision: Decision, decided_by: str) -> dict[str, Any]:
    """What a receipt says. `step_version` is the step's version once the decision is written
    (the decision's write bumps it by one: transitions.plan_write), so a receipt names one state
    of the step; `decided_by` is "rule:<name>@v<n>", "grant:<id>" or the reviewer's username."""
    return {
        "iss": settings.HOLDPOINT_BASE_URL.rstrip("/"),
        "team": step.team.slug,
        "operation_ref": step.operation_ref,
        "tool": step.tool.name,
        "action": decision.action,
        "input_fingerprint": decision.input_fingerprint or None,
        "decided_by": decided_by,
        "decided_at": rfc3339(decision.decided_at),
        "step_version": step.version + 1,
    }


def decision_sign(*, step: Step, decision: Decision, actor: str) -> str:
    """Sign the decision and keep its receipt on it (`decision.receipt`)."""
    decided_by = decision.decided_by or actor
    decision.receipt = receipt_sign(decision_claims(step=step, decision=decision, decided_by=decided_by))
    return decision.receipt
