"""The team's webhooks page: endpoints and dead letters; admins may redeliver."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import Client

from accounts.models import Team
from tests.conftest import logged_in
from webhooks.models import OutboxMessage, WebhookEndpoint
from webhooks.outbox import event_emit
from webhooks.services import endpoint_create

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")


def dead_letter(team: Team) -> OutboxMessage:
    with transaction.atomic():
        event_emit(team_id=team.pk, event_type="tool.halted", data={"tool": "charge_card"})
    message = OutboxMessage.objects.filter(team=team).latest("id")
    OutboxMessage.objects.filter(pk=message.pk).update(status="dead", dead_reason="tries_exhausted", tries=10)
    return message


@pytest.fixture
def letters(team: Team, other_team: Team, allow_private: None) -> tuple[OutboxMessage, OutboxMessage]:
    endpoint_create(team=team, url="http://127.0.0.1:9001/secret-path/tok")
    endpoint_create(team=other_team, url="http://127.0.0.1:9002/hook")
    return dead_letter(team), dead_letter(other_team)


def test_a_member_sees_the_teams_dead_letters_only(make_reviewer, letters) -> None:  # type: ignore[no-untyped-def]
    ours, theirs = letters
    response = logged_in(make_reviewer("vic", "viewer")).get("/webhooks/")
    assert response.status_code == 200
    page = response.content.decode()
    assert ours.message_id in page and theirs.message_id not in page
    assert "No 2xx after the last try" in page
    assert "127.0.0.1:9001" in page and "secret-path" not in page  # the host, never the path
    assert "Redeliver" not in page  # viewers read


def test_an_admin_redelivers_a_dead_letter(make_reviewer, letters) -> None:  # type: ignore[no-untyped-def]
    ours, _ = letters
    client = logged_in(make_reviewer("ada", "admin"))
    assert "Redeliver" in client.get("/webhooks/").content.decode()
    response = client.post(f"/webhooks/messages/{ours.pk}/redeliver")
    assert response.status_code == 302
    ours.refresh_from_db()
    assert (ours.status, ours.dead_reason) == ("pending", "")


def test_a_viewer_cannot_redeliver(make_reviewer, letters) -> None:  # type: ignore[no-untyped-def]
    ours, _ = letters
    logged_in(make_reviewer("vic", "viewer")).post(f"/webhooks/messages/{ours.pk}/redeliver")
    ours.refresh_from_db()
    assert ours.status == "dead"


def test_another_teams_message_is_404(make_reviewer, letters) -> None:  # type: ignore[no-untyped-def]
    _, theirs = letters
    response = logged_in(make_reviewer("ada", "admin")).post(f"/webhooks/messages/{theirs.pk}/redeliver")
    assert response.status_code == 404


def test_a_disabled_endpoints_letter_cannot_be_redelivered(make_reviewer, letters) -> None:  # type: ignore[no-untyped-def]
    ours, _ = letters
    WebhookEndpoint.objects.filter(pk=ours.endpoint_id).update(active=False)
    client = logged_in(make_reviewer("ada", "admin"))
    client.post(f"/webhooks/messages/{ours.pk}/redeliver")
    ours.refresh_from_db()
    assert ours.status == "dead"


def test_the_page_needs_a_login(db) -> None:  # type: ignore[no-untyped-def]
    response = Client().get("/webhooks/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
