"""The admin lists channels and messages, read-only, never showing a secret or a Slack URL."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Team
from notifications.models import Channel, Message
from notifications.services import channel_create, channel_test

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")


def test_channels_and_messages_are_listed_without_secrets_and_cannot_be_changed(team: Team, admin_client: Any) -> None:
    slack = channel_create(team=team, kind="slack", target="http://127.0.0.1:9/services/T0/B0/credential").channel
    hook = channel_create(team=team, kind="webhook", target="http://127.0.0.1:9/hook")
    message = channel_test(channel=slack)

    for path in (
        "/admin/notifications/channel/",
        f"/admin/notifications/channel/{slack.pk}/change/",
        f"/admin/notifications/channel/{hook.channel.pk}/change/",
        "/admin/notifications/message/",
        f"/admin/notifications/message/{message.pk}/change/",
    ):
        page = admin_client.get(path)
        assert page.status_code == 200, path
        assert "credential" not in page.content.decode() and hook.secret not in page.content.decode()
    assert admin_client.get("/admin/notifications/channel/add/").status_code == 403
    assert admin_client.post(f"/admin/notifications/message/{message.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Channel.objects.count() == 2 and Message.objects.count() == 1


def test_staff_may_unlink_a_slack_member_but_never_link_one(admin_client: Any, make_reviewer: Any) -> None:
    from notifications.models import SlackLink

    link = SlackLink.objects.create(user=make_reviewer("rita"), slack_team_id="T0HOLDPT", slack_user_id="U0RITA")
    listing = admin_client.get("/admin/notifications/slacklink/")
    assert listing.status_code == 200 and "U0RITA" in listing.content.decode()
    assert admin_client.get("/admin/notifications/slacklink/add/").status_code == 403
    assert admin_client.post(f"/admin/notifications/slacklink/{link.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not SlackLink.objects.exists()
