"""Team admins register, rotate and disable webhook endpoints on /webhooks/."""

from __future__ import annotations

import re
import socket
import uuid
from typing import Any

import pytest
from django.db import transaction

from accounts.models import Team
from tests.conftest import logged_in
from webhooks.models import OutboxMessage, WebhookEndpoint
from webhooks.outbox import event_emit
from webhooks.services import endpoint_create

from .conftest import fake_resolver

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")
PAGE = "/webhooks/"


def shown_secret(response: Any) -> str:
    found = re.search(r'<code id="signing-secret">(whsec_[^<]+)</code>', response.content.decode())
    assert found is not None, "no secret on the page"
    return found.group(1)


def test_an_admin_registers_an_endpoint_and_sees_its_secret_once(make_reviewer, team: Team, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver({"hooks.example.com": ["93.184.216.34"]}))
    admin = logged_in(make_reviewer("ada", "admin"))
    response = admin.post(
        "/webhooks/endpoints",
        {"team": team.slug, "url": "https://hooks.example.com/h/tok123", "once": uuid.uuid4().hex},
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    endpoint = WebhookEndpoint.objects.get(team=team)
    assert (endpoint.url, endpoint.active) == ("https://hooks.example.com/h/tok123", True)
    assert shown_secret(response) == endpoint.secret
    again = admin.get(PAGE).content.decode()
    assert endpoint.secret not in again and "tok123" not in again


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9001/hook", "http://169.254.169.254/latest/meta-data", "ftp://x.example"]
)
def test_an_unsafe_or_invalid_url_is_refused_and_named(make_reviewer, team: Team, url: str) -> None:  # type: ignore[no-untyped-def]
    admin = logged_in(make_reviewer("ada", "admin"))
    response = admin.post("/webhooks/endpoints", {"team": team.slug, "url": url, "once": uuid.uuid4().hex})
    assert response.status_code == 400
    assert 'id="endpoint-url-error"' in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_rotating_shows_a_new_secret_once(make_reviewer, team: Team, allow_private: None) -> None:  # type: ignore[no-untyped-def]
    endpoint = endpoint_create(team=team, url="http://127.0.0.1:9001/hook").endpoint
    old = endpoint.secret
    response = logged_in(make_reviewer("ada", "admin")).post(
        f"/webhooks/endpoints/{endpoint.pk}/rotate", {"once": uuid.uuid4().hex}
    )
    endpoint.refresh_from_db()
    assert endpoint.secret != old
    assert shown_secret(response) == endpoint.secret


def test_disabling_turns_pending_messages_into_dead_letters(make_reviewer, team: Team, allow_private: None) -> None:  # type: ignore[no-untyped-def]
    endpoint = endpoint_create(team=team, url="http://127.0.0.1:9001/hook").endpoint
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.halted", data={"tool": "charge_card"})
    response = logged_in(make_reviewer("ada", "admin")).post(
        f"/webhooks/endpoints/{endpoint.pk}/disable", {"reason": "receiver retired"}
    )
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert not endpoint.active and endpoint.disabled_reason == "receiver retired (ada)"
    assert OutboxMessage.objects.get().status == "dead"


def test_reviewers_and_other_teams_cannot_change_endpoints(  # type: ignore[no-untyped-def]
    make_reviewer, team: Team, other_team: Team, allow_private: None
) -> None:
    ours = endpoint_create(team=team, url="http://127.0.0.1:9001/hook").endpoint
    theirs = endpoint_create(team=other_team, url="http://127.0.0.1:9002/hook").endpoint
    reviewer = logged_in(make_reviewer("rita", "reviewer"))
    assert "Register an endpoint" not in reviewer.get(PAGE).content.decode()
    assert (
        reviewer.post(
            "/webhooks/endpoints", {"team": team.slug, "url": "http://127.0.0.1:9003/x", "once": uuid.uuid4().hex}
        ).status_code
        == 403
    )
    assert reviewer.post(f"/webhooks/endpoints/{ours.pk}/rotate", {"once": uuid.uuid4().hex}).status_code == 403
    assert reviewer.post(f"/webhooks/endpoints/{ours.pk}/disable").status_code == 403

    admin = logged_in(make_reviewer("ada", "admin"))
    assert admin.post(f"/webhooks/endpoints/{theirs.pk}/rotate", {"once": uuid.uuid4().hex}).status_code == 404
    assert admin.post(f"/webhooks/endpoints/{theirs.pk}/disable").status_code == 404
    assert (
        admin.post(
            "/webhooks/endpoints", {"team": other_team.slug, "url": "http://127.0.0.1:9003/x", "once": uuid.uuid4().hex}
        ).status_code
        == 404
    )
    assert WebhookEndpoint.objects.filter(active=True).count() == 2
    assert {e.pk: e.secret for e in WebhookEndpoint.objects.all()} == {ours.pk: ours.secret, theirs.pk: theirs.secret}


def test_a_reloaded_rotation_does_not_void_the_secret_just_shown(
    make_reviewer, team: Team, allow_private: None
) -> None:  # type: ignore[no-untyped-def]
    endpoint = endpoint_create(team=team, url="http://127.0.0.1:9001/hook").endpoint
    admin = logged_in(make_reviewer("ada", "admin"))
    sent = {"once": uuid.uuid4().hex}
    shown = shown_secret(admin.post(f"/webhooks/endpoints/{endpoint.pk}/rotate", sent))
    again = admin.post(f"/webhooks/endpoints/{endpoint.pk}/rotate", sent)
    assert again.status_code == 200 and "already sent" in again.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.secret == shown


def test_a_reloaded_registration_registers_nothing(make_reviewer, team: Team, allow_private: None) -> None:  # type: ignore[no-untyped-def]
    admin = logged_in(make_reviewer("ada", "admin"))
    sent = {"team": team.slug, "url": "http://127.0.0.1:9001/hook", "once": uuid.uuid4().hex}
    assert admin.post("/webhooks/endpoints", sent).status_code == 200
    assert "already sent" in admin.post("/webhooks/endpoints", sent).content.decode()
    assert WebhookEndpoint.objects.count() == 1
