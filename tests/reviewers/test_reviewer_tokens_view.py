"""/account/tokens/: a signed-in user's reviewer tokens, shown once, stored hashed, revocable."""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from reviewers.models import ReviewerToken
from reviewers.services import reviewer_token_create
from tests.conftest import logged_in

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
    assert (token.user, token.name, token.expires_at, token.revoked_at) == (reviewer, "laptop CLI", None, None)
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
