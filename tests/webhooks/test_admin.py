"""Admin: registering an endpoint goes through the SSRF guard and shows the secret once."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import Client

from envelopes.models import Team
from webhooks.models import OutboxMessage, WebhookEndpoint
from webhooks.outbox import event_emit

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")


@pytest.fixture
def admin(admin_client: Client) -> Client:
    """A superuser's client (pytest-django's admin_client)."""
    return admin_client


def add(admin: Client, team: Team, url: str):  # type: ignore[no-untyped-def]
    return admin.post(
        "/admin/webhooks/webhookendpoint/add/",
        {"team": team.pk, "url": url, "active": "on"},
        follow=True,
    )


def test_the_admin_form_refuses_a_private_target(admin: Client, team: Team, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    response = add(admin, team, "http://169.254.169.254/latest/meta-data/")
    assert "public addresses only" in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_the_admin_generates_the_secret_and_shows_it_once(admin: Client, team: Team, allow_private: None) -> None:
    response = add(admin, team, "http://127.0.0.1:9001/hook")
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret.startswith("whsec_")
    assert endpoint.secret in response.content.decode()
    page = admin.get(f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/").content.decode()
    assert endpoint.secret not in page


def test_the_admin_lists_dead_letters_and_redelivers_them(admin: Client, team: Team, endpoint: WebhookEndpoint) -> None:
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    message = OutboxMessage.objects.get()
    OutboxMessage.objects.filter(pk=message.pk).update(status="dead", dead_reason="tries_exhausted")
    listing = admin.get("/admin/webhooks/outboxmessage/?status__exact=dead").content.decode()
    assert message.message_id in listing
    admin.post(
        "/admin/webhooks/outboxmessage/",
        {"action": "redeliver", "_selected_action": [message.pk]},
    )
    message.refresh_from_db()
    assert message.status == "pending"


def test_the_admin_deletes_no_endpoint_and_no_message(admin: Client, team: Team, endpoint: WebhookEndpoint) -> None:
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.resumed", data={"tool": "x"})
    message = OutboxMessage.objects.get()
    assert admin.post(f"/admin/webhooks/webhookendpoint/{endpoint.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin.post(f"/admin/webhooks/outboxmessage/{message.pk}/delete/", {"post": "yes"}).status_code == 403
    assert (
        WebhookEndpoint.objects.filter(pk=endpoint.pk).exists() and OutboxMessage.objects.filter(pk=message.pk).exists()
    )
