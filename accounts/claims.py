"""The single sign-on roles claim (contract §12), read: which teams, roles and groups a
provider's `holdpoint:TEAM:ROLE` and `holdpoint:TEAM:group:NAME` values grant. Pure Python."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .models import GROUP_NAME_RE, TEAM_SLUG_RE, Membership

CLAIM_PREFIX = "holdpoint"
# A claim with more values than this is cut there: a provider's list of every group a person is
# in may be long, and Holdpoint reads only its own.
CLAIM_VALUES_MAX = 1000
ROLE_RANK = {Membership.Role.VIEWER: 0, Membership.Role.REVIEWER: 1, Membership.Role.ADMIN: 2}


@dataclass(frozen=True)
class ClaimedAccess:
    """What one sign-in's claim grants: a role per team (the highest named) and groups per team."""

    roles: dict[str, str] = field(default_factory=dict)
    groups: dict[str, frozenset[str]] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # holdpoint: values that name no valid team, role or group


def claimed_access(value: object) -> ClaimedAccess:
    """Read the claim's value: a list of strings (or one string, as some providers send a single
    value). Values of other applications are skipped; a `holdpoint:` value that breaks the
    pattern is listed in `ignored`, never an error: the provider's other values still count."""
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    roles: dict[str, str] = {}
    groups: dict[str, set[str]] = {}
    ignored: list[str] = []
    for item in values[:CLAIM_VALUES_MAX]:
        if not isinstance(item, str) or not item.startswith(CLAIM_PREFIX + ":"):
            continue
        parts = item.split(":")
        team = parts[1] if len(parts) > 1 else ""
        if not re.fullmatch(TEAM_SLUG_RE, team):
            ignored.append(item)
        elif len(parts) == 3 and parts[2] in ROLE_RANK:
            if team not in roles or ROLE_RANK[parts[2]] > ROLE_RANK[roles[team]]:  # type: ignore[index]
                roles[team] = parts[2]
        elif len(parts) == 4 and parts[2] == "group" and re.fullmatch(GROUP_NAME_RE, parts[3]):
            groups.setdefault(team, set()).add(parts[3])
        else:
            ignored.append(item)
    return ClaimedAccess(
        roles=roles, groups={team: frozenset(names) for team, names in groups.items()}, ignored=tuple(ignored)
    )
