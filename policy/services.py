"""Every write of the policy app (contract §11): a team's rule set replaced whole, grants made,
used and revoked. The audit link of a change in the team's chain is the caller's (the `rules`
app, above the core, which this app cannot import), written in the same transaction."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import ReviewerGroup, Team

from .cel import compile_when
from .errors import GrantNotFound, GrantRefused, RulesInvalid, VersionMismatch, WhenInvalid
from .models import Effect, Grant, Mode, Rule, RuleSetVersion, Scope

MAX_RULES = 200
MAX_GRANT_TTL_S = 7 * 24 * 3600
DEFAULT_GRANT_TTL_S = 3600
MAX_GRANT_USES = 1000
DEFAULT_GRANT_USES = 20
MAX_DESCRIPTION = 2000

RULE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
GROUP_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
# The core's tool names (envelopes.models.TOOL_NAME_RE), which this app cannot import.
TOOL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")

_FIELDS = {"name", "description", "tools", "when", "effect", "approvals", "approvers", "mode", "enabled"}
# Read-only fields an export carries; accepted back and ignored, so an export applies as it is.
_IGNORED = {"version", "updated_by", "updated_at"}


def _problem(index: int | None, name: str, key: str, reason: str, position: int | None = None) -> dict[str, Any]:
    field = "rules" if index is None else f"rules[{index}]" + (f".{key}" if key else "")
    return {"field": field, "rule": name, "position": position, "reason": reason}


def _rule_problems(index: int, raw: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One rule's problems, and its fields with defaults filled in (None when it is no object)."""
    if not isinstance(raw, dict):
        return [_problem(index, "", "", "A rule is an object.")], None
    name: str = raw["name"] if isinstance(raw.get("name"), str) else ""
    problems: list[dict[str, Any]] = []
    for key in sorted(set(raw) - _FIELDS - _IGNORED, key=str):
        problems.append(_problem(index, name, str(key), f"Unknown field {key!r}."))
    if not isinstance(raw.get("name"), str) or not RULE_NAME_RE.match(raw["name"]):
        problems.append(_problem(index, name, "name", "A name is 1 to 64 of a-z, 0-9 and '-', starting a-z or 0-9."))
    description = raw.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        problems.append(_problem(index, name, "description", f"A description is text of at most {MAX_DESCRIPTION}."))
    tools = raw.get("tools")
    if (
        not isinstance(tools, list)
        or not tools
        or not all(isinstance(t, str) and (t == "*" or TOOL_NAME_RE.match(t)) for t in tools)
        or ("*" in tools and len(tools) > 1)
        or len(set(tools)) != len(tools)
    ):
        problems.append(_problem(index, name, "tools", 'tools is a list of distinct tool names, or ["*"].'))
    effect = raw.get("effect")
    if effect not in Effect.values:
        problems.append(_problem(index, name, "effect", "effect is one of deny, require_approval, allow."))
    approvals = raw.get("approvals", 1)
    if approvals is None:
        approvals = 1
    if isinstance(approvals, bool) or not isinstance(approvals, int) or not 1 <= approvals <= 5:
        problems.append(_problem(index, name, "approvals", "approvals is a whole number from 1 to 5."))
    elif approvals != 1 and effect != Effect.REQUIRE_APPROVAL:
        problems.append(_problem(index, name, "approvals", "approvals is for require_approval rules only."))
    approvers = raw.get("approvers") or ""
    if not isinstance(approvers, str) or (approvers and not GROUP_NAME_RE.match(approvers)):
        problems.append(_problem(index, name, "approvers", "approvers is a group name (a-z, 0-9, '-') or null."))
    elif approvers and effect != Effect.REQUIRE_APPROVAL:
        problems.append(_problem(index, name, "approvers", "approvers is for require_approval rules only."))
    mode = raw.get("mode", Mode.ENFORCE) or Mode.ENFORCE
    if mode not in Mode.values:
        problems.append(_problem(index, name, "mode", "mode is enforce or shadow."))
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.append(_problem(index, name, "enabled", "enabled is true or false."))
    when = raw.get("when")
    if not isinstance(when, str):
        problems.append(_problem(index, name, "when", "when is a CEL expression (text)."))
    else:
        try:
            compile_when(when)
        except WhenInvalid as invalid:
            problems.append(_problem(index, name, "when", invalid.reason, invalid.position))
    fields = {
        "name": raw.get("name"),
        "description": description,
        "tools": tools,
        "when": when,
        "effect": effect,
        "approvals": approvals,
        "approvers": approvers,
        "mode": mode,
        "enabled": enabled,
    }
    return problems, fields


def _validated(rules: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if not isinstance(rules, list):
        return [_problem(None, "", "", "rules is a list of rules.")], []
    problems: list[dict[str, Any]] = []
    if len(rules) > MAX_RULES:
        problems.append(_problem(None, "", "", f"A team has at most {MAX_RULES} rules; this set has {len(rules)}."))
    cleaned: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(rules):
        found, fields = _rule_problems(index, raw)
        problems += found
        if fields is None:
            continue
        name = fields["name"]
        if isinstance(name, str):
            if name in seen:
                problems.append(_problem(index, name, "name", f"The name is also rules[{seen[name]}]'s."))
            seen.setdefault(name, index)
        cleaned.append(fields)
    return problems, cleaned


def _missing_groups(team: Team, rules: list[Any]) -> list[dict[str, Any]]:
    """A rule's `approvers` names a group the team's admins made (contract §12): one query for
    the whole set, however many rules name groups."""
    named = {
        index: raw["approvers"]
        for index, raw in enumerate(rules)
        if isinstance(raw, dict) and isinstance(raw.get("approvers"), str) and GROUP_NAME_RE.match(raw["approvers"])
    }
    if not named:
        return []
    made = set(ReviewerGroup.objects.filter(team=team, name__in=set(named.values())).values_list("name", flat=True))
    return [
        _problem(index, str(rules[index].get("name") or ""), "approvers", f"{team.slug} has no group {name!r}.")
        for index, name in named.items()
        if name not in made
    ]


def rules_validate(rules: Any, *, team: Team | None = None) -> list[dict[str, Any]]:
    """The problems `rules_replace` would refuse the set for ([] when none), writing nothing: for
    forms and dry runs. With `team`, also the groups its rules name."""
    problems = _validated(rules)[0]
    if team is not None and isinstance(rules, list):
        problems += _missing_groups(team, rules)
    return problems


@transaction.atomic
def rules_replace(*, team: Team, rules: list[dict[str, Any]], actor: str, if_version: int | None) -> RuleSetVersion:
    """Replace the team's whole rule set with `rules`, or change nothing: every rule is checked
    first (RulesInvalid with every problem), then, if the set is still at `if_version` (None:
    any; VersionMismatch), rules are matched by name: a changed one gets version + 1, a new one
    version 1, a missing one is deleted; the set's new version is written and returned. A set
    identical to the current one still makes a version (the caller asked to save)."""
    problems, cleaned = _validated(rules)
    problems += _missing_groups(team, rules) if isinstance(rules, list) else []
    if problems:
        raise RulesInvalid(problems)
    # One writer per team's set at a time: the team row is the lock (the set may be empty).
    list(Team.objects.select_for_update().filter(pk=team.pk).values_list("pk", flat=True))
    latest = RuleSetVersion.objects.filter(team=team).order_by("-version").first()
    current = latest.version if latest else 0
    if if_version is not None and if_version != current:
        raise VersionMismatch(current)
    now = timezone.now()
    existing = {rule.name: rule for rule in Rule.objects.filter(team=team)}
    kept: list[Rule] = []
    for position, fields in enumerate(cleaned):
        rule = existing.pop(fields["name"], None)
        if rule is None:
            rule = Rule(team=team, version=1, **fields)
        else:
            changed = any(getattr(rule, key) != value for key, value in fields.items())
            for key, value in fields.items():
                setattr(rule, key, value)
            if not changed and rule.position == position:
                kept.append(rule)
                continue
            if changed:
                rule.version += 1
        rule.position = position
        rule.updated_by, rule.updated_at = actor, now
        rule.save()
        kept.append(rule)
    if existing:
        Rule.objects.filter(pk__in=[rule.pk for rule in existing.values()]).delete()
    return RuleSetVersion.objects.create(
        team=team, version=current + 1, rules=[rule.as_dict() for rule in kept], made_by=actor, made_at=now
    )


def rule_set_current(team: Team) -> tuple[int, list[Rule]]:
    """The team's set as it stands: its version (0 before the first save) and its rules in order."""
    latest = RuleSetVersion.objects.filter(team=team).order_by("-version").values_list("version", flat=True).first()
    return latest or 0, list(Rule.objects.filter(team=team).order_by("position", "id"))


@transaction.atomic
def grant_create(
    *,
    team: Team,
    tool: str,
    when: str,
    scope: str,
    scope_value: str,
    expires_in_s: int | None = None,
    max_uses: int | None = None,
    actor: str,
    from_step_id: int | None = None,
    required_approvals: int = 1,
) -> Grant:
    """A standing grant for calls of `tool` like one approved (§11). `required_approvals` is the
    tool's (or the step's) count, which the caller knows and this app cannot read: a grant is
    never made for calls needing two or more approvals. GrantRefused names the field and rule."""
    expires_in_s = DEFAULT_GRANT_TTL_S if expires_in_s is None else expires_in_s
    max_uses = DEFAULT_GRANT_USES if max_uses is None else max_uses
    if required_approvals >= 2:
        raise GrantRefused(
            "This tool needs two or more approvals: a grant would release its calls with fewer.",
            field="grant",
            rule="four_eyes",
        )
    if not isinstance(tool, str) or not TOOL_NAME_RE.match(tool):
        raise GrantRefused("A grant names one tool.", field="tool", rule="pattern")
    if isinstance(expires_in_s, bool) or not isinstance(expires_in_s, int) or not 1 <= expires_in_s <= MAX_GRANT_TTL_S:
        raise GrantRefused(
            f"A grant expires within 1 to {MAX_GRANT_TTL_S} seconds (7 days).", field="expires_in_s", rule="range"
        )
    if isinstance(max_uses, bool) or not isinstance(max_uses, int) or not 1 <= max_uses <= MAX_GRANT_USES:
        raise GrantRefused(f"A grant has 1 to {MAX_GRANT_USES} uses.", field="max_uses", rule="range")
    if scope not in Scope.values:
        raise GrantRefused("scope is run, key or team.", field="scope", rule="choice")
    scope_value = "" if scope == Scope.TEAM else str(scope_value or "")
    if scope != Scope.TEAM and not scope_value:
        what = "run" if scope == Scope.RUN else "API key"
        raise GrantRefused(f"The step has no {what} for the grant's scope.", field="scope", rule="scope_value")
    try:
        compile_when(when)
    except WhenInvalid as invalid:
        raise GrantRefused(f"when: {invalid}", field="when", rule="cel") from None
    now = timezone.now()
    return Grant.objects.create(
        team=team,
        tool=tool,
        when=when,
        scope=scope,
        scope_value=scope_value,
        created_by=actor,
        created_at=now,
        expires_at=now + timedelta(seconds=expires_in_s),
        max_uses=max_uses,
        from_step_id=from_step_id,
    )


@transaction.atomic
def grant_revoke(*, team: Team, grant_id: int, actor: str) -> Grant:
    """Revoke a grant at once (a use racing it either committed first or finds it revoked);
    revoking a revoked grant changes nothing. GrantNotFound for another team's."""
    grant = Grant.objects.select_for_update().filter(team=team, pk=grant_id).first()
    if grant is None:
        raise GrantNotFound(f"No grant {grant_id} in this team.")
    if grant.revoked_at is None:
        grant.revoked_at, grant.revoked_by = timezone.now(), actor
        grant.save(update_fields=["revoked_at", "revoked_by"])
    return grant


def grant_use(*, grant_id: int, now: Any) -> bool:
    """Take one use of a grant in the caller's transaction: a conditional UPDATE that succeeds
    only while the grant is live, so two calls racing for its last use, or a use racing a revoke,
    never give more than `max_uses` uses. False: it was not live any more."""
    taken = Grant.objects.filter(
        pk=grant_id, revoked_at__isnull=True, expires_at__gt=now, uses__lt=F("max_uses")
    ).update(uses=F("uses") + 1)
    return taken == 1
