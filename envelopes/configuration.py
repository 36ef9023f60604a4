"""Writes that set a team's tools up: their settings and the error-code catalog."""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from accounts.models import GROUP_NAME_RE, ReviewerGroup, Team

from .audit import audit_append
from .models import TOOL_NAME_RE, AuditEvent, ErrorCode, Tool
from .step_context import tool_get_or_register

TOOL_SETTINGS = {
    "side_effects": bool,
    "required_approvals": int,
    "max_attempts": int,
    "consistency_window_s": int,
    "verification_deadline_s": int,
    "approval_ttl_s": int,
    "halt_cooldown_s": int,
    "safe_detail_keys": list,
    "strict_codes": bool,
    "approver_group": str,
    "on_approval_expiry": str,
    "escalate_after_s": int,
    "escalate_to": str,
}
NULLABLE_SETTINGS = frozenset({"escalate_after_s"})  # "" or "none" on the command line: not set
QUORUM_MAX = 5  # required_approvals is 1..5 (contract §12)
CODE_FIELDS = ("category", "retry_class", "next_action", "side_effect", "description", "hint")


class ConfigurationError(ValueError):
    """A setting that breaks a rule; the message names it."""


def tool_name_check(name: str) -> None:
    """Refuse a tool name an envelope could never carry (contract §2): registering it would
    make a tool no agent can reach and the dashboard cannot link."""
    if not re.fullmatch(TOOL_NAME_RE, name):
        raise ConfigurationError(
            f"tool name {name!r} must match {TOOL_NAME_RE} (lowercase letters, digits, '_', '.', '-'; at most 100)"
        )


def parse_setting(name: str, raw: str) -> Any:
    """A KEY=VALUE setting from the command line, typed by the setting's kind."""
    kind = TOOL_SETTINGS.get(name)
    if kind is None:
        raise ConfigurationError(f"unknown setting {name!r}; known: {', '.join(TOOL_SETTINGS)}")
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise ConfigurationError(f"{name} must be true or false")
        return raw.lower() == "true"
    if kind is str:
        return raw.strip()
    if kind is int and name in NULLABLE_SETTINGS and raw.strip().lower() in ("", "none"):
        return None
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise ConfigurationError(f"{name} must be an integer") from None
    return [item.strip() for item in raw.split(",") if item.strip()]


@transaction.atomic
def tool_configure(*, team: Team, name: str, settings: dict[str, Any], actor: str) -> Tool:
    """Create or change a tool's settings; refuses values that break a rule. A change is a
    link of the tool's audit chain naming the actor and each setting's old and new value (a
    tool whose approvals went from 2 to 1 says who did it)."""
    tool_name_check(name)
    tool = tool_get_or_register(team=team, name=name)
    tool = Tool.objects.select_for_update().get(pk=tool.pk)
    changes = {}
    for key, value in settings.items():
        if key not in TOOL_SETTINGS:
            raise ConfigurationError(f"unknown setting {key!r}")
        if getattr(tool, key) != value:
            changes[key] = [getattr(tool, key), value]
        setattr(tool, key, value)
    problems = tool_settings_problems(tool)
    if problems:
        raise ConfigurationError("; ".join(problems))
    if changes:
        audit_append(
            holder=tool,
            kind=AuditEvent.Kind.SETTINGS,
            actor=actor,
            reason="settings_changed",
            data={"changes": changes},
        )
    tool.save()
    return tool


def tool_settings_problems(tool: Tool) -> list[str]:
    """What is wrong with a tool's settings, one sentence each (empty: nothing)."""
    problems = []
    if not isinstance(tool.required_approvals, int) or not 1 <= tool.required_approvals <= QUORUM_MAX:
        problems.append(f"required_approvals must be 1 to {QUORUM_MAX}")
    if tool.on_approval_expiry not in ("cancel", "escalate"):
        problems.append("on_approval_expiry must be cancel or escalate")
    problems += _group_problems(tool, "approver_group")
    problems += _group_problems(tool, "escalate_to")
    after = tool.escalate_after_s
    if after is not None and (not isinstance(after, int) or isinstance(after, bool) or after < 1):
        problems.append("escalate_after_s must be a whole number of seconds, at least 1")
    elif (after is None) != (not tool.escalate_to):
        problems.append("escalate_after_s and escalate_to go together: set both, or neither")
    if tool.max_attempts < 1:
        problems.append("max_attempts must be at least 1")
    if tool.verification_deadline_s < tool.consistency_window_s:
        problems.append("verification_deadline_s must not be below consistency_window_s")
    if tool.approval_ttl_s < 1:
        problems.append("approval_ttl_s must be at least 1")
    for key in ("consistency_window_s", "verification_deadline_s", "halt_cooldown_s"):
        if getattr(tool, key) < 0:
            problems.append(f"{key} must not be negative")
    keys = tool.safe_detail_keys
    if not isinstance(keys, list) or not all(isinstance(k, str) and k.isidentifier() and len(k) <= 64 for k in keys):
        problems.append("safe_detail_keys must be a list of identifiers of at most 64 characters")
    return problems


def _group_problems(tool: Tool, setting: str) -> list[str]:
    """A setting that names one of the team's groups ("": none) must name one that exists."""
    group = getattr(tool, setting)
    if not isinstance(group, str) or (group and not re.fullmatch(GROUP_NAME_RE, group)):
        return [f"{setting} must be a group name (a lowercase letter, then a-z, 0-9, '-') or empty"]
    if group and not ReviewerGroup.objects.filter(team_id=tool.team_id, name=group).exists():
        return [f"{setting} names no group of the team: {group!r} (make it at /teams/<team>/groups/)"]
    return []


@transaction.atomic
def error_code_upsert(*, team: Team, tool_name: str, code: str, fields: dict[str, str]) -> ErrorCode:
    """Add or change a catalog entry; tool_name `*` is team-wide; an unknown tool is registered."""
    unknown = set(fields) - set(CODE_FIELDS)
    if unknown:
        raise ConfigurationError(f"unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(CODE_FIELDS)}")
    if tool_name != "*":
        tool_name_check(tool_name)
    tool = None if tool_name == "*" else tool_get_or_register(team=team, name=tool_name)
    entry = ErrorCode.objects.select_for_update().filter(team=team, tool=tool, code=code).first()
    if entry is None:
        entry = ErrorCode(team=team, tool=tool, code=code)
    for key, value in fields.items():
        setattr(entry, key, value)
    try:
        entry.full_clean(exclude=["team", "tool"], validate_constraints=False)
    except ValidationError as error:
        raise ConfigurationError("; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())) from error
    entry.save()
    return entry
