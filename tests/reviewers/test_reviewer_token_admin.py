"""Reviewer tokens in the admin: listed and revoked, never shown, never added or deleted there."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from reviewers.models import ReviewerToken
from reviewers.services import reviewer_token_create
from tests.reviewers.conftest import ReviewerClient

pytestmark = pytest.mark.django_db


def test_the_admin_lists_and_revokes_tokens_and_never_shows_the_secret(
    admin_client: Client, reviewer: Any, team: Any
) -> None:
    created = reviewer_token_create(user=reviewer, name="chatops bot")
    token = created.token
    api = ReviewerClient(created.raw)
    assert api.queue().status_code == 200

    listing = admin_client.get("/admin/reviewers/reviewertoken/").content.decode()
    change = admin_client.get(f"/admin/reviewers/reviewertoken/{token.pk}/change/").content.decode()
    for page in (listing, change):
        assert "chatops bot" in page
        assert created.raw not in page
        assert token.token_hash not in page
    assert admin_client.get("/admin/reviewers/reviewertoken/add/").status_code == 403

    response = admin_client.post(
        "/admin/reviewers/reviewertoken/", {"action": "revoke", "_selected_action": [str(token.pk)]}, follow=True
    )

    assert "Revoked 1 reviewer token(s)" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api.queue().status_code == 401
    assert admin_client.post(f"/admin/reviewers/reviewertoken/{token.pk}/delete/").status_code == 403
    assert ReviewerToken.objects.filter(pk=token.pk).exists()


def test_renaming_in_the_admin_keeps_the_revocation(admin_client: Client, reviewer: Any) -> None:
    token = reviewer_token_create(user=reviewer, name="old").token
    loaded = admin_client.get(f"/admin/reviewers/reviewertoken/{token.pk}/change/")
    assert loaded.status_code == 200
    ReviewerToken.objects.filter(pk=token.pk).update(revoked_at="2026-11-30T00:00:00Z")  # revoked meanwhile

    admin_client.post(f"/admin/reviewers/reviewertoken/{token.pk}/change/", {"name": "new"})

    token.refresh_from_db()
    assert token.name == "new"
    assert token.revoked_at is not None
