"""Which rule or grant held, refused or approved a step, in one sentence (contract §11,
"explained everywhere"): the step page, the email and Slack messages and the CLI say the same
words, read from `Step.policy` (the rule's name, version and `when`, or the grant's id, maker,
expiry and uses left, as the gate recorded them)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

# What the rule or grant did, by its effect or by the step's reason.
VERBS = {
    "deny": "Refused",
    "denied_by_rule": "Refused",
    "require_approval": "Held for approval",
    "approval_required_by_rule": "Held for approval",
    "allow": "Approved",
    "approved_by_rule": "Approved",
    "approved_by_grant": "Approved",
    "granted_by_grant": "Let through",
}


def _when_at(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    return parse_datetime(value) if isinstance(value, str) else None


def policy_explained(policy: dict[str, Any] | None, *, reason: str = "") -> str | None:
    """The sentence, or None when no rule or grant acted on the step."""
    if not isinstance(policy, dict) or not policy:
        return None
    kind = policy.get("kind") or ("grant" if policy.get("grant") or policy.get("id") else "rule")
    verb = VERBS.get(str(policy.get("effect") or ""), VERBS.get(reason, "Decided"))
    nested_grant, nested_rule = policy.get("grant"), policy.get("rule")
    if kind == "grant":
        grant: dict[str, Any] = nested_grant if isinstance(nested_grant, dict) else policy
        parts = [f"{verb} by grant {grant.get('id')}"]
        if grant.get("created_by"):
            parts.append(f"made by {grant['created_by']}")
        expires = _when_at(grant.get("expires_at"))
        if expires is not None:
            parts.append(f"expires {expires:%Y-%m-%d %H:%M} UTC")
        if grant.get("uses_left") is not None:
            parts.append(f"{grant['uses_left']} uses left")
        text = ", ".join(parts)
    else:
        rule: dict[str, Any] = nested_rule if isinstance(nested_rule, dict) else policy
        text = f"{verb} by rule {rule.get('name')} (version {rule.get('version')})"
    when = policy.get("when")
    if when is None and isinstance(nested_rule, dict):
        when = nested_rule.get("when")
    if when is None and isinstance(nested_grant, dict):
        when = nested_grant.get("when")
    return f"{text}: when {when}" if when else text
