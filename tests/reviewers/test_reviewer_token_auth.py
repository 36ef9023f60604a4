"""A reviewer token acts as its user, with that user's memberships and roles only, and every
request looks it up: revocation, expiry, a lost membership and a deactivated user apply at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from accounts.models import Membership, Team
from envelopes.models import Step
from reviewers.models import ReviewerToken
from reviewers.services import reviewer_token_create, reviewer_tokens_revoke
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db


def test_a_token_reads_its_users_team_only(reviewer: Any, awaiting: Step, other_awaiting: Step) -> None:
    api = token_for(reviewer)

    assert [s["operation_ref"] for s in api.queue("approvals").json()["results"]] == ["run_7/charge_1"]
    assert ReviewerClient(api.raw_token, team="globex").queue().status_code == 404


def test_a_revoked_token_is_refused_at_its_next_request(rita_api: ReviewerClient) -> None:
    assert rita_api.queue().status_code == 200
    reviewer_tokens_revoke(ReviewerToken.objects.all())

    response = rita_api.queue()

    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert response["WWW-Authenticate"] == 'Bearer realm="holdpoint"'


def test_a_token_expires_at_its_expiry(reviewer: Any) -> None:
    api = token_for(reviewer, expires_at=timezone.now() + timedelta(hours=1))
    assert api.queue().status_code == 200

    with time_machine.travel(timezone.now() + timedelta(hours=1, seconds=1)):
        assert api.queue().status_code == 401


def test_an_expiry_in_the_past_is_refused_at_creation(reviewer: Any) -> None:
    with pytest.raises(ValueError, match="future"):
        reviewer_token_create(user=reviewer, name="cli", expires_at=timezone.now() - timedelta(seconds=1))


def test_a_lost_membership_or_role_applies_at_once(rita_api: ReviewerClient, reviewer: Any, awaiting: Step) -> None:
    etag = rita_api.etag("run_7/charge_1")
    Membership.objects.filter(user=reviewer).update(role="viewer")
    assert rita_api.decide("run_7/charge_1", {"action": "approve"}, etag=etag).status_code == 403

    Membership.objects.filter(user=reviewer).delete()
    assert rita_api.queue().status_code == 404


def test_a_deactivated_user_s_token_is_refused(rita_api: ReviewerClient, reviewer: Any) -> None:
    reviewer.is_active = False
    reviewer.save()

    assert rita_api.queue().status_code == 401


def test_an_unknown_token_and_a_bad_header_are_401(team: Team) -> None:
    assert ReviewerClient("hpr_" + "x" * 43).queue().status_code == 401
    nobody = ReviewerClient("whatever")
    assert nobody.queue().status_code == 401
    nobody.http.credentials(HTTP_AUTHORIZATION="Basic cml0YTpwdw==")
    assert nobody.queue().status_code == 401
    nobody.http.credentials()
    response = nobody.queue()
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_last_used_is_written_at_most_once_a_minute(rita_api: ReviewerClient) -> None:
    token = ReviewerToken.objects.get()
    assert token.last_used_at is None
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        rita_api.queue()
        token.refresh_from_db()
        assert token.last_used_at == start
    with time_machine.travel(start + timedelta(seconds=59), tick=False):
        rita_api.queue()
        token.refresh_from_db()
        assert token.last_used_at == start
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        rita_api.queue()
        token.refresh_from_db()
        assert token.last_used_at == start + timedelta(seconds=61)


def test_a_token_in_a_session_cookie_does_nothing(reviewer: Any, client: Any, team: Team) -> None:
    # The reviewer API takes the Authorization header only: a browser session is not a credential there.
    client.force_login(reviewer)
    assert client.get("/api/v1/teams/acme/queue").status_code == 401
