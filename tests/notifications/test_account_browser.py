"""A reviewer in Chromium: opens the link Slack showed them after an unlinked Approve, links
their Slack account on /account/, sees it, and unlinks it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from notifications.models import SlackLink
from notifications.slack import Press, link_token
from tests.browser.conftest import Watched, browser, live_server, log_in, open_page  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def test_a_reviewer_links_and_unlinks_their_slack_account(open_page: OpenPage, make_reviewer: Any) -> None:  # noqa: F811
    rita = make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    page.get_by_role("link", name="rita").click()  # the shell's user name is the account page
    expect(page.locator("h1")).to_have_text("Your account")
    expect(page.locator("#account-teams")).to_contain_text("acme: reviewer")
    expect(page.locator("#account-tokens-link")).to_have_attribute("href", "/account/tokens/")
    expect(page.locator("#slack-links-none")).to_be_visible()

    press = Press(slack_team_id="T0HOLDPT", slack_user_id="U0RITA", action_id="holdpoint.approve", response_url="")
    page.goto("/account/?" + urlencode({"slack": link_token(press)}))
    expect(page.locator("#slack-link-offer")).to_contain_text("Link Slack member U0RITA of workspace T0HOLDPT to rita?")
    page.get_by_role("button", name="Link this Slack account").click()
    expect(page.locator(".flash")).to_contain_text("Linked Slack member U0RITA")
    expect(page.locator("#slack-links")).to_contain_text("U0RITA")
    assert SlackLink.objects.get().user == rita

    page.locator("#slack-links").get_by_role("button", name="Unlink").click()
    expect(page.locator(".flash")).to_contain_text("Unlinked")
    expect(page.locator("#slack-links-none")).to_be_visible()
    assert not SlackLink.objects.exists()
