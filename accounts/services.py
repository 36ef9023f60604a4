"""Writes that set a team's people and agents up: teams, reviewers' memberships, API keys."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from .auth import api_keys_changed
from .claims import ClaimedAccess
from .models import ApiKey, Membership, Team

logger = logging.getLogger(__name__)


class AccountError(ValueError):
    """A team that breaks a rule; the message names it."""


def team_create(*, slug: str, name: str = "") -> Team:
    team = Team(slug=slug, name=name or slug)
    try:
        team.full_clean()
    except ValidationError as error:
        raise AccountError("; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())) from error
    team.save()
    return team


def reviewer_create(*, username: str, password: str, team: Team, role: str) -> User:
    if role not in Membership.Role.values:
        raise ValueError(f"role must be one of {', '.join(Membership.Role.values)}")
    user_model = get_user_model()
    with transaction.atomic():
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model.objects.create_user(username=username, password=password)
        else:
            user.set_password(password)
            user.save()
        # Made here, so `local`: a later sign-in's claim no longer replaces it.
        Membership.objects.update_or_create(
            user=user, team=team, defaults={"role": role, "source": Membership.Source.LOCAL}
        )
    return user


@dataclass(frozen=True)
class NewApiKey:
    api_key: ApiKey
    raw: str  # shown once, never stored


def api_key_create(*, team: Team, name: str) -> NewApiKey:
    raw = ApiKey.generate()
    key = ApiKey.objects.create(team=team, name=name, prefix=raw[: ApiKey.PREFIX_LENGTH], key_hash=ApiKey.hash_key(raw))
    return NewApiKey(api_key=key, raw=raw)


def api_keys_revoke(keys: QuerySet[ApiKey], *, now: datetime | None = None) -> int:
    """Revoke the active keys among `keys`; returns how many. The next request with one of
    them answers 401: the processes that remember it read it again (accounts.auth)."""
    revoked = keys.filter(revoked_at__isnull=True).update(revoked_at=now or timezone.now())
    if revoked:
        api_keys_changed()
    return revoked


@dataclass(frozen=True)
class ClaimApplied:
    memberships: list[Membership]  # the user's memberships after the sign-in, by team slug
    groups: dict[str, frozenset[str]]  # the groups the claim names, per team the user is in
    unknown_teams: list[str]  # teams the claim names that do not exist (never created from a claim)


@transaction.atomic
def memberships_from_claim(*, user: User, claimed: ClaimedAccess) -> ClaimApplied:
    """Set `user`'s memberships to what a sign-in's roles claim grants (contract §12): the
    memberships a claim made before are replaced (changed, or removed when the claim no longer
    names their team); a membership made in Holdpoint (`local`) stays as it is, whatever the
    claim says of its team. A claim never creates a team."""
    teams = {team.slug: team for team in Team.objects.filter(slug__in=[*claimed.roles, *claimed.groups])}
    current = {
        m.team_id: m
        for m in Membership.objects.select_for_update(of=("self",)).select_related("team").filter(user=user)
    }
    for slug, role in claimed.roles.items():
        team = teams.get(slug)
        if team is None:
            continue
        membership = current.get(team.pk)
        if membership is None:
            current[team.pk] = Membership.objects.create(
                user=user, team=team, role=role, source=Membership.Source.CLAIM
            )
        elif membership.source == Membership.Source.CLAIM and membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    claimed_team_ids = {teams[slug].pk for slug in claimed.roles if slug in teams}
    for team_id, membership in list(current.items()):
        if membership.source == Membership.Source.CLAIM and team_id not in claimed_team_ids:
            membership.delete()
            del current[team_id]
    member_of = {m.team_id for m in current.values()}
    unknown = sorted(slug for slug in {*claimed.roles, *claimed.groups} if slug not in teams)
    if unknown:
        logger.info("sign-in of %s: the roles claim names unknown teams %s", user.get_username(), unknown)
    return ClaimApplied(
        memberships=sorted(current.values(), key=lambda m: m.team.slug),
        groups={slug: names for slug, names in claimed.groups.items() if slug in teams and teams[slug].pk in member_of},
        unknown_teams=unknown,
    )
