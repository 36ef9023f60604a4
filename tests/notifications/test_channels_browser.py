"""A team admin in Chromium: adds a Slack channel, sends a test, and sees how it went."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from notifications.models import Channel
from tests.browser.conftest import Watched, browser, live_server, log_in, open_page  # noqa: F401 (fixtures)
from tests.notifications.conftest import SlackReceiver
from tests.webhooks.conftest import Answer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def test_an_admin_adds_a_channel_sends_a_test_and_sees_its_status(
    open_page: OpenPage,  # noqa: F811
    make_reviewer: Any,
    slack: SlackReceiver,
    settings: Any,
) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    make_reviewer("ada", "admin")
    page = open_page().page
    log_in(page, "ada")
    page.goto("/notifications/")

    page.get_by_label("Kind").select_option("slack")
    page.get_by_label("Target").fill(slack.url("/services/T0/B0/credential"))
    page.get_by_label("Name").fill("reviewers on Slack")
    page.get_by_role("button", name="Add channel").click()
    expect(page.locator("#channel-added")).to_contain_text("Added reviewers on Slack")
    channel = Channel.objects.get()
    row = page.locator(f"#channel-{channel.pk}")
    expect(row).to_contain_text("127.0.0.1")
    expect(row).not_to_contain_text("credential")

    row.get_by_role("button", name="Send a test").click()
    expect(page.locator(".flash")).to_contain_text("Test sent through reviewers on Slack")
    row = page.locator(f"#channel-{channel.pk}")
    expect(row.locator(".last-success")).not_to_have_text("–")
    slack.check()
    assert "Test notification" in slack.payloads()[0]["text"]

    slack.answer(Answer(status=500))
    row.get_by_role("button", name="Send a test").click()
    expect(page.locator(".flash")).to_contain_text("failed: HTTP 500")
    expect(page.locator(f"#channel-{channel.pk} .last-error")).to_contain_text("HTTP 500")
    expect(page.locator("#messages")).to_contain_text("failed")
