"""Delegation's settings (contract §12): a reviewer is away from one team until a time, naming
another reviewer or admin of that team; anything else is refused naming the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.away import AwayError, away_clear, away_set, away_user_ids
from accounts.models import Membership

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(make_reviewer: Any, other_team: Any) -> dict[str, Any]:
    return {
        "alice": make_reviewer("alice", "reviewer"),
        "bob": make_reviewer("bob", "admin"),
        "vic": make_reviewer("vic", "viewer"),
        "gus": make_reviewer("gus", "reviewer", in_team=other_team),
    }


def _refused(people: dict[str, Any], team: Any, **kwargs: Any) -> AwayError:
    args = {"user": people["alice"], "team": team, "until": timezone.now() + timedelta(days=3), "delegate": "bob"}
    with pytest.raises(AwayError) as refused:
        away_set(**(args | kwargs))
    return refused.value


def test_a_reviewer_is_away_with_a_delegate_and_then_back(people: dict[str, Any], team: Any) -> None:
    until = timezone.now() + timedelta(days=3)
    membership = away_set(user=people["alice"], team=team, until=until, delegate="bob")
    assert (membership.away_until, membership.delegate) == (until, people["bob"])
    assert list(away_user_ids(team, timezone.now())) == [people["alice"].pk]
    assert list(away_user_ids(team, until + timedelta(seconds=1))) == []  # away ends by itself
    assert away_clear(user=people["alice"], team=team)
    assert not away_clear(user=people["alice"], team=team)
    assert list(away_user_ids(team, timezone.now())) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"until": timezone.now() - timedelta(minutes=1)}, "until"),  # in the past
        ({"until": timezone.now() + timedelta(days=400)}, "until"),  # more than a year ahead
        ({"delegate": "alice"}, "delegate"),  # herself
        ({"delegate": "gus"}, "delegate"),  # another team's reviewer
        ({"delegate": "vic"}, "delegate"),  # a viewer decides nothing
        ({"delegate": "nobody"}, "delegate"),
        ({"delegate": ""}, "delegate"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_field(
    people: dict[str, Any], team: Any, change: dict[str, Any], field: str
) -> None:
    assert _refused(people, team, **change).field == field
    assert not Membership.objects.get(user=people["alice"], team=team).away_until


def test_a_delegate_who_is_away_too_is_refused(people: dict[str, Any], team: Any) -> None:
    away_set(user=people["bob"], team=team, until=timezone.now() + timedelta(days=1), delegate="alice")
    refused = _refused(people, team)
    assert refused.field == "delegate" and "away too" in str(refused)


def test_a_viewer_cannot_be_away(people: dict[str, Any], team: Any) -> None:
    with pytest.raises(PermissionError):
        away_set(user=people["vic"], team=team, until=timezone.now() + timedelta(days=1), delegate="bob")


def test_the_database_refuses_a_delegate_for_oneself(people: dict[str, Any], team: Any) -> None:
    membership = Membership.objects.get(user=people["alice"], team=team)
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.filter(pk=membership.pk).update(
            away_until=timezone.now() + timedelta(days=1), delegate=people["alice"]
        )


def test_a_delegate_decides_in_the_away_members_groups_of_that_team_only(
    people: dict[str, Any], team: Any, other_team: Any
) -> None:
    from accounts.away import groups_with_stand_ins
    from accounts.groups import group_member_add

    alice, bob = people["alice"], people["bob"]
    Membership.objects.create(user=alice, team=other_team, role="reviewer")
    Membership.objects.create(user=bob, team=other_team, role="reviewer")
    group_member_add(team=team, name="finance", user=alice)
    group_member_add(team=other_team, name="finance", user=alice)  # away from acme only
    group_member_add(team=team, name="ops", user=bob)
    now = timezone.now()
    assert groups_with_stand_ins(bob, now) == {team.pk: frozenset({"ops"})}
    away_set(user=alice, team=team, until=now + timedelta(days=1), delegate="bob", now=now)
    assert groups_with_stand_ins(bob, now) == {team.pk: frozenset({"ops", "finance"})}
    assert groups_with_stand_ins(bob, now + timedelta(days=2)) == {team.pk: frozenset({"ops"})}  # back by itself
