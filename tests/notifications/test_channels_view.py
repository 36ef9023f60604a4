"""/notifications/: every member sees the channels with their last success and error; team
admins add channels, send a test, rotate a webhook channel's secret (shown once) and disable."""

from __future__ import annotations

import re
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from accounts.models import Team
from notifications.models import Channel
from notifications.services import channel_create
from tests.conftest import logged_in
from tests.notifications.conftest import SlackReceiver
from tests.webhooks.conftest import Answer, Receiver

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")


def once(page: str) -> str:
    match = re.search(r'name="once" value="([0-9a-f]{32})"', page)
    assert match
    return match.group(1)


def test_a_member_sees_channels_but_no_forms(team: Team, make_reviewer: Any, slack: SlackReceiver) -> None:
    channel_create(team=team, kind="slack", target=slack.url("/services/T0/B0/credential"), name="reviewers")
    page = logged_in(make_reviewer("vic", "viewer")).get("/notifications/").content.decode()
    assert "reviewers" in page and "127.0.0.1" in page
    assert "credential" not in page  # a Slack URL is a credential: only its host is shown
    assert "Add a channel" not in page and "Send a test" not in page


def test_an_admin_adds_a_webhook_channel_and_sees_its_secret_once(
    team: Team, make_reviewer: Any, receiver: Receiver
) -> None:
    client = logged_in(make_reviewer("ada", "admin"))
    token = once(client.get("/notifications/").content.decode())
    form = {"once": token, "team": "acme", "kind": "webhook", "target": receiver.url(), "events": ["tool.halted"]}
    answer = client.post("/notifications/channels", form)
    assert answer.status_code == 200 and answer["Cache-Control"] == "no-store"
    channel = Channel.objects.get()
    assert (channel.kind, channel.events) == ("webhook", ["tool.halted"])
    assert channel.secret in answer.content.decode()
    again = client.post("/notifications/channels", form)  # a reload of the answer
    assert channel.secret not in again.content.decode() and Channel.objects.count() == 1

    page = client.get("/notifications/").content.decode()
    assert channel.secret not in page
    rotated = client.post(f"/notifications/channels/{channel.pk}/rotate", {"once": once(page)}).content.decode()
    channel.refresh_from_db()
    assert channel.secret in rotated


def test_an_admin_sends_a_test_and_sees_how_it_went(team: Team, make_reviewer: Any, receiver: Receiver) -> None:
    created = channel_create(team=team, kind="webhook", target=receiver.url())
    client = logged_in(make_reviewer("ada", "admin"))
    answer = client.post(f"/notifications/channels/{created.channel.pk}/test", follow=True)
    assert "Test sent through" in answer.content.decode()
    body = Webhook(created.secret).verify(receiver.received[0].body, receiver.received[0].headers)
    assert body["type"] == "notification.test"

    receiver.answer(Answer(status=500))
    failed = client.post(f"/notifications/channels/{created.channel.pk}/test", follow=True).content.decode()
    assert "failed: HTTP 500" in failed
    assert "HTTP 500" in client.get("/notifications/").content.decode()


def test_an_admin_disables_a_channel(team: Team, make_reviewer: Any) -> None:
    channel = channel_create(team=team, kind="email", target="ops@example.com").channel
    client = logged_in(make_reviewer("ada", "admin"))
    answer = client.post(f"/notifications/channels/{channel.pk}/disable", {"reason": "moved"}, follow=True)
    assert "Disabled" in answer.content.decode()
    channel.refresh_from_db()
    assert channel.disabled and channel.disabled_reason.startswith("moved")


def test_bad_input_is_a_400_naming_the_field(team: Team, make_reviewer: Any) -> None:
    client = logged_in(make_reviewer("ada", "admin"))
    token = once(client.get("/notifications/").content.decode())
    form = {"once": token, "team": "acme", "kind": "webhook", "target": "http://10.0.0.7/hook", "events": ["x"]}
    answer = client.post("/notifications/channels", form)
    assert answer.status_code == 400
    form["events"] = ["approval.requested"]
    form["target"] = "not an address"
    form["kind"] = "email"
    answer = client.post("/notifications/channels", form)
    assert answer.status_code == 400 and "not an email address" in answer.content.decode()
    assert not Channel.objects.exists()


def test_only_admins_change_channels_and_other_teams_are_404(team: Team, other_team: Team, make_reviewer: Any) -> None:
    ours = channel_create(team=team, kind="email", target="ops@example.com").channel
    theirs = channel_create(team=other_team, kind="email", target="ops@globex.example").channel
    reviewer = logged_in(make_reviewer("rita", "reviewer"))
    assert reviewer.post(f"/notifications/channels/{ours.pk}/disable").status_code == 403
    admin = logged_in(make_reviewer("ada", "admin"))
    assert admin.post(f"/notifications/channels/{theirs.pk}/disable").status_code == 404
    assert admin.post(f"/notifications/channels/{theirs.pk}/test").status_code == 404
    assert "globex" not in admin.get("/notifications/").content.decode()
    assert admin.get(f"/notifications/channels/{ours.pk}/disable").status_code == 405
    assert admin.post("/notifications/").status_code == 405


def test_the_page_needs_a_login(client: Any) -> None:
    assert client.get("/notifications/").status_code == 302
