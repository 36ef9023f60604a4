"""Delegation (contract §12): a reviewer away until a time names a delegate in the team, who then
decides "for" them wherever they could, while they get no notices.

Away is a member's own word about one team (Membership.away_until, .delegate), set and cleared
by them alone. The reads here cost one query each, however many members, groups or delegations a
team has: they are filters and subqueries, never a loop of lookups.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from .models import GroupMembership, Membership, Team

DECIDERS = (Membership.Role.REVIEWER, Membership.Role.ADMIN)
# How far ahead one may be away: a date years off is a typo, and would silence a reviewer for good.
AWAY_MAX = timedelta(days=366)


class AwayError(ValueError):
    """An away setting that breaks a rule; `field` names the input at fault (`until`, `delegate`)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def away_now_q(now: datetime, prefix: str = "") -> Q:
    """The memberships away at `now`: away_until is in the future."""
    return Q(**{f"{prefix}away_until__gt": now})


def deciders_of(team: Team | int) -> QuerySet[Membership]:
    """The team's reviewers and admins, who may be named delegates (one query, by username)."""
    team_id = team if isinstance(team, int) else team.pk
    return (
        Membership.objects.filter(team_id=team_id, role__in=DECIDERS).select_related("user").order_by("user__username")
    )


@transaction.atomic
def away_set(
    *, user: User, team: Team, until: datetime, delegate: str | User | None, now: datetime | None = None
) -> Membership:
    """Mark `user` away from `team` until `until`, `delegate` (a username or a user) deciding for
    them meanwhile. Refused (AwayError naming the field) for a time not in the future or more than
    a year ahead, and for a delegate who is not another reviewer or admin of the team or who is
    away themselves (no chains: a delegate stands in for others only while present).
    PermissionError when `user` is not a reviewer or admin of the team."""
    now = now or timezone.now()
    membership = Membership.objects.select_for_update().filter(user=user, team=team).first()
    if membership is None or not membership.can_decide:
        raise PermissionError("Only reviewers and admins of this team can be away from it.")
    if until <= now:
        raise AwayError("until: a time away ends in the future.", field="until")
    if until > now + AWAY_MAX:
        raise AwayError("until: at most a year ahead.", field="until")
    name = delegate.get_username() if isinstance(delegate, AbstractBaseUser) else (delegate or "").strip()
    if not name:
        raise AwayError("delegate: name the reviewer who decides for you while you are away.", field="delegate")
    if name == user.get_username():
        raise AwayError("delegate: someone other than you decides while you are away.", field="delegate")
    stand_in = deciders_of(team).filter(user__username=name).first()
    if stand_in is None:
        raise AwayError(f"delegate: {name[:150]} is not a reviewer or admin of {team.slug}.", field="delegate")
    if stand_in.is_away(now):
        raise AwayError(
            f"delegate: {name} is away too, until {stand_in.away_until:%Y-%m-%d %H:%M} UTC.", field="delegate"
        )
    membership.away_until, membership.delegate = until, stand_in.user
    membership.save(update_fields=["away_until", "delegate"])
    return membership


def away_clear(*, user: User, team: Team) -> bool:
    """`user` is back in `team`: their delegate decides for them no more. False if not away."""
    return (
        Membership.objects.filter(user=user, team=team, away_until__isnull=False).update(away_until=None, delegate=None)
        > 0
    )


def away_user_ids(team: Team | int, now: datetime) -> QuerySet[Membership, int]:
    """The ids of the team's members away at `now`: a subquery for a recipients' filter (they
    get no notices while away)."""
    team_id = team if isinstance(team, int) else team.pk
    return Membership.objects.filter(away_now_q(now), team_id=team_id).values_list("user_id", flat=True)


def stand_in_ids(team: Team | int, group: str, now: datetime) -> QuerySet[Membership, int]:
    """The delegates of the group's members away at `now`: a subquery for the group's
    recipients (they decide for those members meanwhile)."""
    team_id = team if isinstance(team, int) else team.pk
    away_members = GroupMembership.objects.filter(group__team_id=team_id, group__name=group).values("user_id")
    return Membership.objects.filter(
        away_now_q(now), team_id=team_id, user_id__in=away_members, delegate__isnull=False
    ).values_list("delegate_id", flat=True)


def away_in_teams(team_ids: list[int], now: datetime) -> list[Membership]:
    """Who is away in these teams, with their delegates, for the queues' line (one query)."""
    return list(
        Membership.objects.filter(away_now_q(now), team_id__in=team_ids)
        .select_related("user", "delegate", "team")
        .order_by("team__slug", "user__username")
    )


def groups_with_stand_ins(user: User | AnonymousUser, now: datetime) -> dict[int, frozenset[str]]:
    """The groups a user decides in per team id: their own, and those of the away members they
    stand in for, in that member's team only (one query). With both memberships deciders, a
    member of the union decides a step exactly when they or one of those members may."""
    if not user.is_authenticated:
        return {}
    away_for = Membership.objects.filter(away_now_q(now), delegate_id=user.pk, role__in=DECIDERS)
    # The away member's groups in the team they are away from only: one member, one team.
    same_team = away_for.filter(user_id=OuterRef("user_id"), team_id=OuterRef("group__team_id"))
    own = GroupMembership.objects.filter(user_id=user.pk).values_list("group__team_id", "group__name")
    theirs = (
        GroupMembership.objects.filter(user_id__in=away_for.values("user_id"))
        .filter(Exists(same_team))
        .values_list("group__team_id", "group__name")
    )
    rows = own.union(theirs)  # one statement; each side served by the user and delegate indexes
    found: dict[int, set[str]] = {}
    for team_id, name in rows:
        found.setdefault(team_id, set()).add(name)
    return {team_id: frozenset(names) for team_id, names in found.items()}


def stand_ins_for(*, user: User, team_id: int, deciding_groups: tuple[str, ...], now: datetime) -> list[User]:
    """The away members of the team `user` may decide for, on a step those groups decide: they
    named `user` their delegate, may decide, and (for a group's step) are in one of its groups.
    By username; one query."""
    members = Membership.objects.filter(away_now_q(now), team_id=team_id, delegate_id=user.pk, role__in=DECIDERS)
    if deciding_groups:
        members = members.filter(
            user__in=GroupMembership.objects.filter(group__team_id=team_id, group__name__in=deciding_groups).values(
                "user_id"
            )
        )
    return [m.user for m in members.select_related("user").order_by("user__username")]


def delegate_choices(*, user: User, team_ids: list[int]) -> dict[int, list[str]]:
    """Per team, the usernames `user` may name their delegate: the other reviewers and admins
    (one query for all the teams)."""
    found: dict[int, list[str]] = {team_id: [] for team_id in team_ids}
    rows = (
        Membership.objects.filter(team_id__in=team_ids, role__in=DECIDERS)
        .exclude(user_id=user.pk)
        .order_by("user__username")
        .values_list("team_id", "user__username")
    )
    for team_id, username in rows:
        found[team_id].append(username)
    return found
