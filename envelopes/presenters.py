"""The wire shapes of contract §4, shared by the API answers and the webhook bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Prefetch

from . import lifecycle
from .models import Decision, Envelope, Step
from .proposal import proposal_of
from .rfc3339 import rfc3339


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


def decisions_prefetch() -> Prefetch:
    """A list of steps' decisions with their reviewers, in one query."""
    return Prefetch("decisions", queryset=Decision.objects.select_related("reviewer", "on_behalf_of"))


def _edited_binding(step: Step, decisions: list[Decision]) -> Decision | None:
    """The edited approval the step's binding holds (contract §4: the directive carries its input
    until a granted attempt uses it), or None."""
    if not step.approval_fingerprint:
        return None
    for decision in reversed(decisions):
        # The fingerprint names the input: any edited approval of it holds that input (a later
        # plain approval of the same fingerprint approved the same edit, under review again).
        if decision.action == "approve" and decision.edited and decision.input_fingerprint == step.approval_fingerprint:
            return decision
    return None


def decided_by_representation(decision: Decision) -> dict[str, Any]:
    """§4's `decided_by` of a decision: a reviewer, or the rule or grant its `decided_by` names
    ("rule:<name>@v<version>", "grant:<id>")."""
    text = decision.decided_by
    if decision.reviewer_id is None and text.startswith("rule:"):
        name, _, version = text[len("rule:") :].rpartition("@v")
        rule = {"name": name, "version": int(version) if version.isdigit() else None}
        return {"kind": "rule", "reviewer": None, "rule": rule, "grant": None}
    if decision.reviewer_id is None and text.startswith("grant:"):
        grant_id = text[len("grant:") :]
        grant = {"id": int(grant_id) if grant_id.isdigit() else grant_id}
        return {"kind": "grant", "reviewer": None, "rule": None, "grant": grant}
    return {"kind": "reviewer", "reviewer": decision.decider, "rule": None, "grant": None}


def decision_reviewer(decision: Decision) -> str:
    """The decision's `reviewer` on the wire: the username, or for a rule's or grant's decision
    its `decided_by` text, so that v1 readers of a string keep one."""
    return decision.decider


def policy_representation(policy: dict[str, Any] | None) -> dict[str, Any] | None:
    """§4's `policy` of a step from what the gate or a hold stored (`Step.policy`): the effect,
    the rule (name, version, when) or grant (id, maker, expiry, uses left), and when."""
    if not policy:
        return None
    rule = grant = None
    if policy.get("kind") == "rule":
        rule = {"name": policy.get("name"), "version": policy.get("version"), "when": policy.get("when")}
    elif policy.get("kind") == "grant":
        grant = {
            "id": policy.get("id"),
            "created_by": policy.get("created_by"),
            "expires_at": policy.get("expires_at"),
            "uses_left": policy.get("uses_left"),
            "when": policy.get("when"),
        }
    return {"effect": policy.get("effect"), "rule": rule, "grant": grant, "evaluated_at": policy.get("evaluated_at")}


def decision_representation(decision: Decision) -> dict[str, Any]:
    """A decision in the §4 step shape and the §5 `step.decided` body."""
    return {
        "action": decision.action,
        "reviewer": decision_reviewer(decision),
        "decided_by": decided_by_representation(decision),
        # The away member a delegate decided for (§12 "Delegation"), by username; else null.
        "on_behalf_of": decision.on_behalf_of.get_username() if decision.on_behalf_of is not None else None,
        "reason": decision.reason,
        "decided_at": rfc3339(decision.decided_at),
        "input_fingerprint": decision.input_fingerprint or None,  # "" when none
        "edited": decision.edited,
        "receipt": decision.receipt or None,  # contract §13; none on decisions made before receipts
    }


def _step_directive(
    step: Step, decisions: list[Decision], *, reason: str, not_before: datetime | None
) -> dict[str, Any]:
    directive = directive_representation(step, reason=reason, not_before=not_before)
    edited = _edited_binding(step, decisions)
    if edited is not None:
        directive["input"] = edited.edited_input
        directive["input_fingerprint"] = edited.input_fingerprint
    return directive


def _decisions_of(step: Step) -> list[Decision]:
    """The step's decisions: the prefetched list when there is one (what `step.decisions.all()`
    answers then, without building a related manager for it), else a query."""
    prefetched = getattr(step, "_prefetched_objects_cache", {}).get("decisions")
    return list(prefetched if prefetched is not None else step.decisions.all())


def step_representation(
    step: Step,
    *,
    directive_reason: str = "",
    directive_not_before: datetime | None = None,
    built: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The step shape of §4. Reads the step's decisions (prefetched where lists are served) and
    its proposal (`proposal_of`, remembered on the instance; `proposals_load` for lists).

    `built`: this step's shape without a directive reason, already built in this request (for
    its `step.state_changed` event) and the step unchanged since; only the directive is built
    again, and only when the answer names its own reason or time (the hot path's answer)."""
    if built is not None and not directive_reason and directive_not_before is None:
        return built
    decisions = _decisions_of(step)
    if built is not None:
        directive = _step_directive(step, decisions, reason=directive_reason, not_before=directive_not_before)
        return {**built, "directive": directive}
    directive = _step_directive(step, decisions, reason=directive_reason, not_before=directive_not_before)
    proposal = proposal_of(step)
    return {
        "operation_ref": step.operation_ref,
        "tool": step.tool.name,
        "state": step.state,
        "held": step.held,
        "reason": step.reason,
        "correlation_id": step.correlation_id or None,
        "run_id": step.run_id or None,
        "trace_id": step.trace_id or None,
        "approvals_required": step.approvals_required,
        "approver_group": step.held_for or None,
        "attempts": step.attempts,
        "max_attempts": step.tool.max_attempts,
        "not_before": rfc3339(step.not_before),
        "deadline": rfc3339(step.deadline or step.expires_at),
        "directive": directive,
        "last_envelope": envelope_summary(step.last_envelope),
        "decisions": [decision_representation(decision) for decision in decisions],
        "proposal": proposal.as_dict() if proposal is not None else None,
        "policy": policy_representation(step.policy),
        "created_at": rfc3339(step.created_at),
        "updated_at": rfc3339(step.updated_at),
        "url": step_url(step),
    }
