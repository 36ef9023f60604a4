"""Writes that set a team's people and agents up: teams, reviewers' memberships, API keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from .auth import api_keys_changed
from .models import ApiKey, Membership, Team


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
        Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})
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
