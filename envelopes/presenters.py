"""The wire shapes of contract §4, shared by the API answers and the webhook bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

from django.conf import settings

from . import lifecycle
from .models import Envelope, Step


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


def directive_representation(step: Step, *, reason: str = "", not_before: datetime | None = None) -> dict[str, Any]:
    answer = lifecycle.directive(step.snapshot(), reason=reason, not_before=not_before)
    answer["not_before"] = rfc3339(answer["not_before"])
    return answer


def envelope_summary(envelope: Envelope | None) -> dict[str, Any] | None:
    if envelope is None:
        return None
    return {
        "envelope_id": envelope.pk,
        "ok": envelope.ok,
        "code": envelope.code or None,
        "category": envelope.category or None,
        "commit_state": envelope.commit_state or None,
        "next_action": envelope.next_action or None,
        "scope": envelope.scope or None,
        "resource_id": envelope.resource_id or None,
        "safe_details": envelope.safe_details,
        "occurred_at": rfc3339(envelope.occurred_at),
    }


def step_url(step: Step) -> str:
    return f"{settings.HOLDPOINT_BASE_URL.rstrip('/')}/steps/{step.pk}/"


def api_step_path(step: Step) -> str:
    return f"/api/v1/steps/{quote(step.operation_ref, safe='')}"


def step_representation(
    step: Step, *, directive_reason: str = "", directive_not_before: datetime | None = None
) -> dict[str, Any]:
    """The step shape of §4. Reads the step's decisions (prefetched where lists are served)."""
    decisions = [
        {
            "action": decision.action,
            "reviewer": decision.reviewer.get_username(),
            "reason": decision.reason,
            "decided_at": rfc3339(decision.decided_at),
        }
        for decision in step.decisions.all()
    ]
    return {
        "operation_ref": step.operation_ref,
        "tool": step.tool.name,
        "state": step.state,
        "held": step.held,
        "reason": step.reason,
        "correlation_id": step.correlation_id or None,
        "run_id": step.run_id or None,
        "attempts": step.attempts,
        "max_attempts": step.tool.max_attempts,
        "not_before": rfc3339(step.not_before),
        "deadline": rfc3339(step.deadline or step.expires_at),
        "directive": directive_representation(step, reason=directive_reason, not_before=directive_not_before),
        "last_envelope": envelope_summary(step.last_envelope),
        "decisions": decisions,
        "created_at": rfc3339(step.created_at),
        "updated_at": rfc3339(step.updated_at),
        "url": step_url(step),
    }
