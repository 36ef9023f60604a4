"""/keys/: a team's admins create API keys (shown once) and revoke them; members see prefixes."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client

from accounts.models import ApiKey, Team
from accounts.services import api_key_create
from tests.conftest import AgentClient, error_envelope, logged_in

pytestmark = pytest.mark.django_db

PAGE = "/keys/"


def form(team: Team, name: str, once: str = "") -> dict[str, str]:
    return {"team": team.slug, "name": name, "once": once or uuid.uuid4().hex}


@pytest.fixture
def admin(make_reviewer) -> Client:  # type: ignore[no-untyped-def]
    return logged_in(make_reviewer("ada", role="admin"))


def test_an_admin_creates_a_key_that_is_shown_once_and_works(admin: Client, team: Team) -> None:
    response = admin.post(PAGE, form(team, "billing-agent"))
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    raw = re.search(r'<code id="new-api-key">(hp_[A-Za-z0-9_-]+)</code>', response.content.decode()).group(1)

    key = ApiKey.objects.get(name="billing-agent")
    assert key.key_hash == ApiKey.hash_key(raw) and raw not in (key.prefix, key.key_hash)
    assert AgentClient(raw).envelope(error_envelope()).status_code == 201

    again = admin.get(PAGE).content.decode()
    assert f"{key.prefix}…" in again and raw not in again


def test_a_reviewer_sees_prefixes_but_may_not_create_or_revoke(rita: Client, team: Team) -> None:
    existing = api_key_create(team=team, name="ci").api_key
    html = rita.get(PAGE).content.decode()
    assert f"{existing.prefix}…" in html and existing.key_hash not in html
    assert "Create key" not in html and ">Revoke<" not in html

    assert rita.post(PAGE, form(team, "sneaky")).status_code == 403
    assert rita.post(f"/keys/{existing.pk}/revoke").status_code == 403
    assert not ApiKey.objects.filter(name="sneaky").exists()
    assert ApiKey.objects.get(pk=existing.pk).revoked_at is None


def test_an_admin_revokes_a_key_and_its_next_request_answers_401(admin: Client, team: Team) -> None:
    created = api_key_create(team=team, name="ci")
    response = admin.post(f"/keys/{created.api_key.pk}/revoke")
    assert response.status_code in (302, 303)
    assert response["Location"] == PAGE
    assert AgentClient(created.raw).get("/api/v1/steps").status_code == 401
    assert "revoked" in admin.get(PAGE).content.decode()


def test_another_teams_keys_are_invisible_and_out_of_reach(admin: Client, other_team: Team) -> None:
    theirs = api_key_create(team=other_team, name="theirs")
    assert theirs.api_key.prefix not in admin.get(PAGE).content.decode()
    assert admin.post(f"/keys/{theirs.api_key.pk}/revoke").status_code == 404
    assert admin.post(PAGE, form(other_team, "intruder")).status_code == 404
    assert AgentClient(theirs.raw).get("/api/v1/steps").status_code == 200
    assert not ApiKey.objects.filter(name="intruder").exists()


def test_a_name_is_required_and_named_in_the_answer(admin: Client, team: Team) -> None:
    response = admin.post(PAGE, form(team, "   "))
    assert response.status_code == 400
    assert 'aria-invalid="true"' in response.content.decode()
    assert not ApiKey.objects.exists()


def test_the_page_asks_for_a_login(client: Client) -> None:
    response = client.get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_posting_the_same_form_again_creates_nothing(admin: Client, team: Team) -> None:
    sent = form(team, "billing-agent")
    first = admin.post(PAGE, sent)
    assert 'id="new-api-key"' in first.content.decode()
    again = admin.post(PAGE, sent)  # a reload of the answer
    assert again.status_code == 200
    assert 'id="new-api-key"' not in again.content.decode()
    assert "already sent" in again.content.decode()
    assert ApiKey.objects.filter(name="billing-agent").count() == 1
    assert admin.post(PAGE, form(team, "billing-agent")).status_code == 200  # a new form is a new key
    assert ApiKey.objects.filter(name="billing-agent").count() == 2


def test_a_form_without_its_token_is_refused(admin: Client, team: Team) -> None:
    assert admin.post(PAGE, {"team": team.slug, "name": "no-token"}).status_code == 400
    assert not ApiKey.objects.exists()
