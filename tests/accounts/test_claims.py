"""The roles claim (contract §12): `holdpoint:TEAM:ROLE` and `holdpoint:TEAM:group:NAME` set a
user's memberships at every sign-in; claim-made ones are replaced, others stay."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from accounts.claims import claimed_access
from accounts.models import Membership, Team
from accounts.services import memberships_from_claim, reviewer_create, team_create
from tests.conftest import PASSWORD


def test_the_claim_names_roles_and_groups_and_the_highest_role_of_a_team_wins() -> None:
    claimed = claimed_access(
        [
            "holdpoint:acme:viewer",
            "holdpoint:acme:reviewer",
            "holdpoint:acme:group:finance",
            "holdpoint:acme:group:on-call",
            "holdpoint:globex:admin",
            "holdpoint:globex:viewer",
            "jira-users",
            "other:acme:admin",
        ]
    )

    assert claimed.roles == {"acme": "reviewer", "globex": "admin"}
    assert claimed.groups == {"acme": frozenset({"finance", "on-call"})}
    assert claimed.ignored == ()


@pytest.mark.parametrize(
    "value",
    [
        "holdpoint:acme:owner",
        "holdpoint:acme",
        "holdpoint::reviewer",
        "holdpoint:ac me:reviewer",
        "holdpoint:acme:group:Finance",
        "holdpoint:acme:group:9lives",
        "holdpoint:acme:group:" + "a" * 41,
        "holdpoint:acme:group:finance:extra",
        "holdpoint:acme\x00:reviewer",
    ],
)
def test_a_holdpoint_value_that_breaks_the_pattern_grants_nothing_and_is_reported(value: str) -> None:
    claimed = claimed_access([value, "holdpoint:globex:viewer"])

    assert claimed.ignored == (value,)
    assert claimed.groups == {}
    assert claimed.roles == {"globex": "viewer"}


@pytest.mark.parametrize("value", [None, 7, {"holdpoint:acme:admin": True}, [["holdpoint:acme:admin"]], [3]])
def test_a_claim_of_another_shape_grants_nothing(value: Any) -> None:
    assert claimed_access(value).roles == {}


def test_a_single_string_claim_is_read_as_one_value() -> None:
    assert claimed_access("holdpoint:acme:admin").roles == {"acme": "admin"}


@pytest.fixture
def teams(db: Any) -> dict[str, Team]:
    return {slug: team_create(slug=slug) for slug in ("acme", "globex", "initech")}


def memberships(user: User) -> dict[str, tuple[str, str]]:
    return {m.team.slug: (m.role, m.source) for m in Membership.objects.filter(user=user).select_related("team")}


def test_claim_made_memberships_are_replaced_and_local_ones_stay(teams: dict[str, Team]) -> None:
    user = reviewer_create(username="alice", password=PASSWORD, team=teams["initech"], role="viewer")

    memberships_from_claim(
        user=user,
        claimed=claimed_access(["holdpoint:acme:reviewer", "holdpoint:globex:viewer", "holdpoint:initech:admin"]),
    )
    assert memberships(user) == {
        "acme": ("reviewer", "claim"),
        "globex": ("viewer", "claim"),
        # Made in Holdpoint (createreviewer): the claim does not change it.
        "initech": ("viewer", "local"),
    }

    applied = memberships_from_claim(user=user, claimed=claimed_access(["holdpoint:acme:admin"]))

    assert memberships(user) == {"acme": ("admin", "claim"), "initech": ("viewer", "local")}
    assert [m.team.slug for m in applied.memberships] == ["acme", "initech"]

    memberships_from_claim(user=user, claimed=claimed_access([]))

    assert memberships(user) == {"initech": ("viewer", "local")}


def test_a_claim_never_creates_a_team_and_groups_count_only_where_the_user_is_a_member(
    teams: dict[str, Team],
) -> None:
    user = User.objects.create_user("bob")

    applied = memberships_from_claim(
        user=user,
        claimed=claimed_access(
            [
                "holdpoint:acme:reviewer",
                "holdpoint:acme:group:finance",
                "holdpoint:globex:group:ops",
                "holdpoint:nope:admin",
            ]
        ),
    )

    assert memberships(user) == {"acme": ("reviewer", "claim")}
    assert not Team.objects.filter(slug="nope").exists()
    assert applied.unknown_teams == ["nope"]
    assert applied.groups == {"acme": frozenset({"finance"})}
