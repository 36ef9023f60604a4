"""The grants API (contract §11): list, make, revoke, through reviewer tokens."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import AuditEvent
from policy.models import Grant
from tests.rules.conftest import RulesClient

pytestmark = pytest.mark.django_db

GRANT = {
    "tool": "issue_refund",
    "when": 'input.customer == "c_1"',
    "scope": "team",
    "expires_in_s": 3600,
    "max_uses": 5,
}


def test_an_admin_makes_lists_and_revokes_a_grant(admin_api: RulesClient, viewer_api: RulesClient, team: Team) -> None:
    made = admin_api.grant(GRANT)
    assert made.status_code == 201, made.content
    grant = made.json()
    assert grant["tool"] == "issue_refund" and grant["created_by"] == "ada" and grant["live"] is True
    assert grant["uses"] == 0 and grant["uses_left"] == 5 and grant["scope_value"] is None

    listed = viewer_api.grants().json()
    assert [g["id"] for g in listed["results"]] == [grant["id"]] and listed["next"] is None
    assert [g["id"] for g in viewer_api.grants(live="true").json()["results"]] == [grant["id"]]

    revoked = admin_api.revoke(grant["id"])
    assert revoked.status_code == 200
    assert revoked.json()["live"] is False and revoked.json()["revoked_by"] == "ada"
    assert viewer_api.grants(live="true").json()["results"] == []
    assert [g["id"] for g in viewer_api.grants(live="false").json()["results"]] == [grant["id"]]
    # Revoking again answers the grant as it is and audits nothing more.
    assert admin_api.revoke(grant["id"]).status_code == 200
    reasons = list(
        AuditEvent.objects.filter(chain=f"policy:{team.pk}").order_by("seq").values_list("reason", flat=True)
    )
    assert reasons == ["grant_created", "grant_revoked"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"expires_in_s": 8 * 24 * 3600}, "expires_in_s"),
        ({"max_uses": 1001}, "max_uses"),
        ({"max_uses": 0}, "max_uses"),
        ({"when": "input.customer =="}, "when"),
        ({"scope": "run"}, "scope"),  # a run scope names its run
    ],
)
def test_a_grant_past_a_limit_is_refused_naming_the_field(
    admin_api: RulesClient, change: dict[str, Any], field: str
) -> None:
    response = admin_api.grant({**GRANT, **change})
    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["field"] == field
    assert not Grant.objects.exists()


def test_no_grant_on_a_tool_that_needs_two_approvals(admin_api: RulesClient, team: Team) -> None:
    tool_configure(team=team, name="issue_refund", settings={"required_approvals": 2}, actor="test")
    response = admin_api.grant(GRANT)
    assert response.status_code == 422
    assert response.json()["errors"][0]["rule"] == "four_eyes"


@pytest.mark.parametrize(
    "body", ["{", "[]", {"tool": "issue_refund"}, {**GRANT, "scope": "galaxy"}, {**GRANT, "extra": 1}]
)
def test_a_bad_grant_body_is_refused(admin_api: RulesClient, body: Any) -> None:
    assert admin_api.grant(body).status_code in (400, 422)
    assert not Grant.objects.exists()


@pytest.mark.parametrize("role", ["viewer", "reviewer"])
def test_only_admins_make_and_revoke_grants(member_api: Any, admin_api: RulesClient, role: str) -> None:
    grant_id = admin_api.grant(GRANT).json()["id"]
    api = member_api("mo", role)
    assert api.grants().status_code == 200
    assert api.grant(GRANT).status_code == 403
    assert api.revoke(grant_id).status_code == 403
    assert Grant.objects.get(pk=grant_id).revoked_at is None


def test_another_teams_grant_is_404(admin_api: RulesClient, member_api: Any, other_team: Team) -> None:
    grant_id = admin_api.grant(GRANT).json()["id"]
    stranger = member_api("olga", "admin", in_team=other_team)
    assert stranger.revoke(grant_id).status_code == 404
    assert stranger.grants().json()["results"] == []
    assert RulesClient(stranger.raw, team="acme").grants().status_code == 404
    assert admin_api.revoke(999_999).status_code == 404
    assert Grant.objects.get(pk=grant_id).revoked_at is None
