"""Each send that announced a step is on its page's timeline: "notified <channel>", or the
failure of that try (contract §9)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from accounts.models import Team
from notifications.services import channel_create
from notifications.tasks import notify
from tests.conftest import AgentClient, logged_in
from tests.notifications.conftest import hold
from tests.webhooks.conftest import Answer, Receiver

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")


def test_the_step_page_shows_each_notification_try(
    team: Team, agent: AgentClient, receiver: Receiver, make_reviewer: Any
) -> None:
    channel_create(team=team, kind="webhook", target=receiver.url(), name="ops hook")
    receiver.answer(Answer(status=502))
    step = hold(agent)
    client = logged_in(make_reviewer("rita", "reviewer"))
    with time_machine.travel(timezone.now(), tick=False) as clock:
        notify()
        failed = client.get(f"/steps/{step.pk}/").content.decode()
        clock.shift(timedelta(seconds=10))
        notify()
    page = client.get(f"/steps/{step.pk}/").content.decode()
    assert "notifying ops hook failed" in failed and "HTTP 502" in failed
    assert "notified ops hook" in page
