"""Reviewer groups (contract §12): a team's named groups of reviewers and admins, who is in them,
and who may decide a step held for one. Writes by team admins, `createreviewer --group` and the
single sign-on claim; the reads answer in one query whatever the number of groups or members."""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from .models import GROUP_NAME_RE, GroupMembership, Membership, ReviewerGroup, Team

# The decisions a step's group keeps to itself; an admin may still cancel (contract §12).
GROUP_ACTIONS = frozenset({"approve", "reject", "cancel"})


class GroupError(ValueError):
    """A group write that breaks a rule; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def group_name_check(name: str, *, field: str = "name") -> None:
    if not isinstance(name, str) or not re.fullmatch(GROUP_NAME_RE, name):
        raise GroupError(
            f"{field}: a group name is a lowercase letter, then up to 39 lowercase letters, digits or '-'.",
            field=field,
        )


def group_exists(*, team: Team, name: str) -> bool:
    return ReviewerGroup.objects.filter(team=team, name=name).exists()


def groups_of(*, user: User, team: Team | int) -> frozenset[str]:
    """The names of `user`'s groups in `team`: one query, however many groups the team has."""
    team_id = team if isinstance(team, int) else team.pk
    return frozenset(
        GroupMembership.objects.filter(user=user, group__team_id=team_id).values_list("group__name", flat=True)
    )


def may_decide(*, membership: Membership | None, deciding_groups: Iterable[str], user_groups: Iterable[str]) -> bool:
    """May this member approve, reject or edit a step those groups decide (Step.deciding_groups;
    none: any reviewer)? No query: the caller has the user's groups."""
    if membership is None or not membership.can_decide:
        return False
    deciding = tuple(deciding_groups)
    return not deciding or not set(deciding).isdisjoint(user_groups)


@transaction.atomic
def group_create(*, team: Team, name: str) -> ReviewerGroup:
    group_name_check(name)
    group, _ = ReviewerGroup.objects.get_or_create(team=team, name=name)
    return group


def group_delete(*, team: Team, name: str) -> bool:
    return ReviewerGroup.objects.filter(team=team, name=name).delete()[0] > 0


def group_member_add(*, team: Team, name: str, user: User, source: str = Membership.Source.LOCAL) -> GroupMembership:
    """Put a reviewer or admin of `team` in its group `name` (made if missing). A local add makes
    a claim's membership local: Holdpoint's own word then stands over the next sign-in's claim."""
    group_name_check(name, field="group")
    membership = Membership.objects.filter(user=user, team=team).first()
    if membership is None or not membership.can_decide:
        raise GroupError(f"user: {user.get_username()} is not a reviewer or admin of {team.slug}.", field="user")
    group = group_create(team=team, name=name)
    member, made = GroupMembership.objects.get_or_create(group=group, user=user, defaults={"source": source})
    if not made and source == Membership.Source.LOCAL and member.source != source:
        member.source = source
        member.save(update_fields=["source"])
    return member


def group_member_remove(*, team: Team, name: str, user_id: int) -> bool:
    return GroupMembership.objects.filter(group__team=team, group__name=name, user_id=user_id).delete()[0] > 0


@transaction.atomic
def groups_from_claim(*, user: User, claimed: dict[str, frozenset[str]]) -> None:
    """Set `user`'s claim-made group memberships to what a sign-in's claim names (team slug ->
    group names, for the teams they are a member of): the claim's earlier ones are replaced,
    local ones stay. A claim names only groups the team's admins made: it never makes one."""
    GroupMembership.objects.filter(user=user, source=Membership.Source.CLAIM).exclude(
        group__in=ReviewerGroup.objects.filter(_claimed_q(claimed))
    ).delete()
    deciders = set(
        Membership.objects.filter(
            user=user, team__slug__in=list(claimed), role__in=[Membership.Role.REVIEWER, Membership.Role.ADMIN]
        ).values_list("team_id", flat=True)
    )
    have = set(GroupMembership.objects.filter(user=user).values_list("group_id", flat=True))
    wanted = ReviewerGroup.objects.filter(team_id__in=deciders).filter(_claimed_q(claimed)) if deciders else []
    GroupMembership.objects.bulk_create(
        [GroupMembership(group=g, user=user, source=Membership.Source.CLAIM) for g in wanted if g.pk not in have]
    )


def _claimed_q(claimed: dict[str, frozenset[str]]) -> Q:
    q = Q(pk__in=[])
    for slug, names in claimed.items():
        q |= Q(team__slug=slug, name__in=sorted(names))
    return q
