"""Admin: registering an endpoint goes through the SSRF guard; a new or rotated secret is shown
once, in the answer to the POST that made it, never in a flash message; reloading that answer
creates no second endpoint and voids no rotated secret."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.db import transaction
from django.test import Client

from accounts.models import Team
from webhooks.models import OutboxMessage, WebhookEndpoint
from webhooks.outbox import event_emit

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")


@pytest.fixture
def admin(admin_client: Client) -> Client:
    """A superuser's client (pytest-django's admin_client)."""
    return admin_client


ADD = "/admin/webhooks/webhookendpoint/add/"
CHANGELIST = "/admin/webhooks/webhookendpoint/"


def once_in(page: str) -> str:
    match = re.search(r'name="once" value="([0-9a-f-]+)"', page)
    assert match, "the form carries a one-time token"
    return match.group(1)


def add_form(admin: Client) -> dict[str, str]:
    return {"once": once_in(admin.get(ADD).content.decode())}


def add(admin: Client, team: Team, url: str, form: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    form = form if form is not None else add_form(admin)
    return admin.post(ADD, {"team": team.pk, "url": url, "active": "on", **form}, follow=True)


def flashed(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(message) for message in get_messages(response.wsgi_request)]


def test_the_admin_form_refuses_a_private_target(admin: Client, team: Team, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    response = add(admin, team, "http://169.254.169.254/latest/meta-data/")
    assert "public addresses only" in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_a_new_secret_is_shown_once_in_the_answer_never_in_a_flash_message(
    admin: Client, team: Team, allow_private: None
) -> None:
    response = add(admin, team, "http://127.0.0.1:9001/hook")
    assert response.redirect_chain == []  # the answer to the POST itself
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret.startswith("whsec_")
    assert endpoint.secret in response.content.decode()
    assert "no-store" in response["Cache-Control"]
    assert not any(endpoint.secret in message for message in flashed(response))
    for page in (CHANGELIST, f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/"):
        assert endpoint.secret not in admin.get(page).content.decode()


def test_reloading_the_answer_registers_no_second_endpoint(admin: Client, team: Team, allow_private: None) -> None:
    form = add_form(admin)
    first = add(admin, team, "http://127.0.0.1:9001/hook", form)
    again = add(admin, team, "http://127.0.0.1:9001/hook", form)  # the browser posts the form again
    assert WebhookEndpoint.objects.count() == 1
    secret = WebhookEndpoint.objects.get().secret
    assert secret in first.content.decode()
    assert "already sent" in again.content.decode() and secret not in again.content.decode()


def test_a_form_sent_back_with_an_error_keeps_its_token(admin: Client, team: Team, settings) -> None:  # type: ignore[no-untyped-def]
    form = add_form(admin)
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    assert "public addresses only" in add(admin, team, "http://127.0.0.1:9001/hook", form).content.decode()
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    corrected = add(admin, team, "http://127.0.0.1:9001/hook", form)
    assert WebhookEndpoint.objects.get().secret in corrected.content.decode()


def test_a_rotated_secret_is_shown_once_after_a_confirmation_and_a_reload_rotates_nothing(
    admin: Client, endpoint: WebhookEndpoint
) -> None:
    old = endpoint.secret
    selected = {"action": "rotate_secret", "_selected_action": [endpoint.pk]}
    confirm = admin.post(CHANGELIST, {**selected, "index": 0})
    assert confirm.status_code == 200 and "Rotate signing secrets?" in confirm.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.secret == old  # nothing rotated before the confirmation
    form = {**selected, "post": "yes", "once": once_in(confirm.content.decode())}

    rotated = admin.post(CHANGELIST, form)
    endpoint.refresh_from_db()
    assert endpoint.secret != old and endpoint.secret in rotated.content.decode()
    assert "no-store" in rotated["Cache-Control"]
    assert not any(endpoint.secret in message for message in flashed(rotated))
    assert endpoint.secret not in admin.get(CHANGELIST).content.decode()

    new = endpoint.secret
    reloaded = admin.post(CHANGELIST, form)
    endpoint.refresh_from_db()
    assert endpoint.secret == new  # the secret just copied still signs
    assert "already sent" in reloaded.content.decode() and new not in reloaded.content.decode()


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
