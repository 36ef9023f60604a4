"""/account/tokens/: a signed-in user's reviewer tokens, shown once, stored hashed, revocable."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from accounts.signin import SIGNED_IN_AT
from reviewers.models import ReviewerToken
from reviewers.services import reviewer_token_create
from tests.conftest import PASSWORD, logged_in

pytestmark = pytest.mark.django_db


def create(client: Client, name: str = "laptop CLI", expires_in: str = "", once: str | None = None):  # type: ignore[no-untyped-def]
    return client.post("/account/tokens/", {"name": name, "expires_in": expires_in, "once": once or uuid.uuid4().hex})


def shown_token(response: Any) -> str:
    match = re.search(r'<code id="new-reviewer-token">(hpr_[A-Za-z0-9_-]+)</code>', response.content.decode())
    assert match, response.content.decode()
    return match.group(1)


def test_a_new_token_is_shown_once_and_only_its_hash_is_stored(reviewer: Any) -> None:
    rita = logged_in(reviewer)

    response = create(rita)

    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    raw = shown_token(response)
    token = ReviewerToken.objects.get()
    assert (token.user, token.name, token.revoked_at) == (reviewer, "laptop CLI", None)
    assert token.expires_at is not None  # 90 days unless set otherwise (contract §12)
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert token.prefix == raw[:12]
    assert raw not in str(list(ReviewerToken.objects.values()))
    # Never again: the list shows the prefix only.
    page = rita.get("/account/tokens/").content.decode()
    assert raw not in page
    assert f"{token.prefix}…" in page


def test_posting_the_same_form_again_creates_nothing(reviewer: Any) -> None:
    rita = logged_in(reviewer)
    once = uuid.uuid4().hex
    raw = shown_token(create(rita, once=once))

    again = create(rita, once=once)

    assert "already sent" in again.content.decode()
    assert raw not in again.content.decode()
    assert 'id="new-reviewer-token"' not in again.content.decode()
    assert ReviewerToken.objects.count() == 1


def test_an_expiry_choice_sets_the_expiry(reviewer: Any) -> None:
    create(logged_in(reviewer), expires_in="30")

    token = ReviewerToken.objects.get()
    assert token.expires_at is not None
    assert 29.9 < (token.expires_at - timezone.now()).total_seconds() / 86400 <= 30


@pytest.mark.parametrize(("name", "expires_in"), [("", ""), ("   ", ""), ("x" * 101, ""), ("cli", "12")])
def test_a_bad_form_is_400_and_creates_nothing(reviewer: Any, name: str, expires_in: str) -> None:
    response = create(logged_in(reviewer), name=name, expires_in=expires_in)

    assert response.status_code == 400
    assert not ReviewerToken.objects.exists()


def test_the_page_lists_only_the_users_own_tokens(reviewer: Any, make_reviewer: Any) -> None:
    sam = make_reviewer("sam")
    reviewer_token_create(user=sam, name="sams bot")
    reviewer_token_create(user=reviewer, name="ritas cli")

    page = logged_in(reviewer).get("/account/tokens/").content.decode()

    assert "ritas cli" in page
    assert "sams bot" not in page


def test_revoking_a_token_refuses_its_next_request(reviewer: Any, team: Any) -> None:
    rita = logged_in(reviewer)
    raw = shown_token(create(rita))
    token = ReviewerToken.objects.get()
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/teams/acme/queue").status_code == 200

    response = rita.post(f"/account/tokens/{token.pk}/revoke")

    assert response.status_code == 303
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api.get("/api/v1/teams/acme/queue").status_code == 401
    assert "revoked" in rita.get("/account/tokens/").content.decode()


def test_another_users_token_cannot_be_revoked(reviewer: Any, make_reviewer: Any) -> None:
    sams = reviewer_token_create(user=make_reviewer("sam"), name="sams bot").token

    assert logged_in(reviewer).post(f"/account/tokens/{sams.pk}/revoke").status_code == 404
    sams.refresh_from_db()
    assert sams.revoked_at is None


def test_the_page_needs_a_signed_in_user_and_revoking_needs_post(client: Client, reviewer: Any) -> None:
    response = client.get("/account/tokens/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert client.post("/account/tokens/", {"name": "x", "once": uuid.uuid4().hex}).status_code == 302
    assert not ReviewerToken.objects.exists()
    token = reviewer_token_create(user=reviewer, name="cli").token
    assert logged_in(reviewer).get(f"/account/tokens/{token.pk}/revoke").status_code == 405


def test_a_token_expires_after_90_days_unless_set_otherwise(reviewer: Any, team: Any) -> None:
    rita = logged_in(reviewer)
    assert '<option value="90" selected>in 90 days</option>' in rita.get("/account/tokens/").content.decode()
    raw = shown_token(create(rita))  # no expiry chosen
    token = ReviewerToken.objects.get()
    assert token.expires_at is not None
    assert abs((token.expires_at - timezone.now()) - timedelta(days=90)) < timedelta(minutes=1)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")

    with time_machine.travel(timezone.now() + timedelta(days=89, hours=23)):
        assert api.get("/api/v1/teams/acme/queue").status_code == 200
    with time_machine.travel(timezone.now() + timedelta(days=90, minutes=1)):
        expired = api.get("/api/v1/teams/acme/queue")

    assert expired.status_code == 401
    assert expired["Content-Type"] == "application/problem+json"
    assert expired.json()["status"] == 401


def test_the_default_lifetime_is_a_setting_and_0_means_never(reviewer: Any, settings: Any) -> None:
    settings.HOLDPOINT_REVIEWER_TOKEN_DAYS = 0
    rita = logged_in(reviewer)
    assert '<option value="" selected>never</option>' in rita.get("/account/tokens/").content.decode()

    create(rita)

    assert ReviewerToken.objects.get().expires_at is None
    settings.HOLDPOINT_REVIEWER_TOKEN_DAYS = 14
    assert reviewer_token_create(user=reviewer, name="bot").token.expires_at.date() == (  # type: ignore[union-attr]
        timezone.now() + timedelta(days=14)
    ).date()


def test_making_a_token_needs_a_sign_in_within_the_last_10_minutes(reviewer: Any) -> None:
    rita = Client()
    assert rita.post("/accounts/login/", {"username": "rita", "password": PASSWORD}).status_code == 302

    with time_machine.travel(timezone.now() + timedelta(minutes=11)):
        stale = create(rita)

        assert stale.status_code == 403
        assert "Making a token asks for a sign-in within the last 10 minutes" in stale.content.decode()
        assert 'href="/accounts/login/?next=/account/tokens/"' in stale.content.decode()
        assert not ReviewerToken.objects.exists()

        # Signing in again (here with the password; single sign-on marks the session the same way).
        assert rita.post("/accounts/login/", {"username": "rita", "password": PASSWORD}).status_code == 302
        assert create(rita).status_code == 200
    assert ReviewerToken.objects.count() == 1


def test_a_session_that_never_signed_in_here_must_sign_in_again(reviewer: Any) -> None:
    """A session from before the sign-in time was recorded (or one with the mark removed)."""
    rita = logged_in(reviewer)
    session = rita.session
    del session[SIGNED_IN_AT]
    session.save()

    assert create(rita).status_code == 403
    assert not ReviewerToken.objects.exists()
