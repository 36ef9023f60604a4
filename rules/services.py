"""Every change of a team's rules and grants from the doors of this app (API, pages, command),
each with its link in the team's policy chain in the same transaction (contract §11: every
change versioned and audited).

The rules themselves, their checks and the grants are `policy`'s (below the core, it cannot
write the core's audit chain); these functions call its services inside one transaction that
also appends the audit link, so a change and its link commit together or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from envelopes.audit import audit_append
from envelopes.models import AuditEvent, Tool
from policy import services as policy
from policy.models import Grant, Rule, RuleSetVersion

from .models import TeamPolicyChain
from .ruleset import rules_diff, set_editable


def _chain_locked(team: Team) -> TeamPolicyChain:
    """The team's chain head, made at the first change, locked until the transaction ends."""
    TeamPolicyChain.objects.get_or_create(team=team)
    return TeamPolicyChain.objects.select_for_update().get(team=team)


def _audit(*, team: Team, actor: str, reason: str, data: dict[str, Any], now: datetime | None = None) -> AuditEvent:
    chain = _chain_locked(team)
    event = audit_append(holder=chain, kind=AuditEvent.Kind.POLICY, actor=actor, reason=reason, data=data, now=now)
    chain.save(update_fields=["audit_seq", "audit_head"])
    return event


# --- reads -----------------------------------------------------------------------------------


def rules_current(team: Team) -> tuple[int, list[Rule]]:
    """The set's version (0 before the first change) and its rules, in evaluation order."""
    return policy.rule_set_current(team)


def set_etag(team: Team, version: int) -> str:
    """The rule set's entity tag: the set's version (RuleSetVersion.version), per team."""
    return f'"rules.{team.pk}.{version}"'


def etag_matches(if_match: str, team: Team, version: int) -> bool:
    """Strong comparison; `*` never matches (a change names the version it was made on)."""
    current = set_etag(team, version)
    return any(tag.strip() == current for tag in if_match.split(","))


# --- writes ----------------------------------------------------------------------------------


@transaction.atomic
def rule_set_replace(
    *, team: Team, rules: Sequence[Any], actor: str, if_version: int | None, via: str
) -> RuleSetVersion:
    """Replace the team's whole set with `rules` (editable fields; read-only ones are dropped).

    Raises policy.errors.RulesInvalid (nothing written) or VersionMismatch when the set is no
    longer at `if_version` (None: whatever it is). The audit link names the new version, what
    changed, and the door (`via`)."""
    _chain_locked(team)  # first: two changes of one team queue here, not inside policy
    _, before = rules_current(team)
    draft = set_editable(rules)
    made = policy.rules_replace(team=team, rules=draft, actor=actor, if_version=if_version)
    diff = rules_diff([rule_shape(rule) for rule in before], draft)
    _audit(
        team=team,
        actor=actor,
        reason="rules_replaced",
        data={
            "version": made.version,
            "added": diff.added,
            "changed": sorted(diff.changed),
            "removed": diff.removed,
            "via": via,
        },
    )
    return made


@transaction.atomic
def grant_add(
    *,
    team: Team,
    tool: str,
    when: str,
    scope: str,
    scope_value: str,
    expires_in_s: int,
    max_uses: int,
    actor: str,
    via: str,
) -> Grant:
    # The four-eyes limit needs the tool's own count, which policy cannot read (it is below the core).
    configured = Tool.objects.filter(team=team, name=tool).values_list("required_approvals", flat=True).first()
    grant = policy.grant_create(
        required_approvals=configured or 1,
        team=team,
        tool=tool,
        when=when,
        scope=scope,
        scope_value=scope_value,
        expires_in_s=expires_in_s,
        max_uses=max_uses,
        actor=actor,
        from_step_id=None,
    )
    _audit(
        team=team,
        actor=actor,
        reason="grant_created",
        data={
            "grant": grant.pk,
            "tool": tool,
            "when": when,
            "scope": scope,
            "scope_value": scope_value,
            "expires_at": grant.expires_at.isoformat(),
            "max_uses": grant.max_uses,
            "via": via,
        },
    )
    return grant


@transaction.atomic
def grant_remove(*, team: Team, grant_id: int, actor: str, via: str) -> Grant:
    """Revoke at once; a grant already revoked (or expired) is answered as it is, unaudited."""
    grant = Grant.objects.select_for_update().get(team=team, pk=grant_id)  # Grant.DoesNotExist: the caller's 404
    if grant.revoked_at is not None:
        return grant
    grant = policy.grant_revoke(team=team, grant_id=grant_id, actor=actor)
    _audit(team=team, actor=actor, reason="grant_revoked", data={"grant": grant.pk, "uses": grant.uses, "via": via})
    return grant


# --- shapes ----------------------------------------------------------------------------------


def rule_shape(rule: Rule) -> dict[str, Any]:
    """A rule on the wire (contract §11)."""
    return rule.as_dict()


def grant_live(grant: Grant, now: datetime | None = None) -> bool:
    return grant.is_live(now or timezone.now())


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def grant_shape(grant: Grant, now: datetime | None = None) -> dict[str, Any]:
    """A grant on the wire (contract §11), with `live` and how many uses are left."""
    return {
        "id": grant.pk,
        "tool": grant.tool,
        "when": grant.when,
        "scope": grant.scope,
        "scope_value": grant.scope_value or None,
        "created_by": grant.created_by,
        "created_at": _time(grant.created_at),
        "expires_at": _time(grant.expires_at),
        "max_uses": grant.max_uses,
        "uses": grant.uses,
        "uses_left": max(grant.max_uses - grant.uses, 0),
        "revoked_at": _time(grant.revoked_at),
        "revoked_by": grant.revoked_by or None,
        "from_step": grant.from_step_id,
        "live": grant_live(grant, now),
    }
