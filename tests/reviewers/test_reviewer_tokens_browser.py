"""A reviewer in a real browser: a personal token created at /account/tokens/, copied once, used
against the reviewer API of the live server, and revoked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from reviewers.models import ReviewerToken
from tests.browser.conftest import Watched, browser, live_server, log_in, open_page

__all__ = ["browser", "live_server", "open_page"]  # the browser tests' fixtures, used here

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def test_a_reviewer_creates_a_token_copies_it_uses_it_and_revokes_it(
    open_page: OpenPage, make_reviewer: Any, live_server: Any
) -> None:
    make_reviewer("rita", "reviewer")
    watched = open_page()
    watched.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = watched.page
    log_in(page, "rita")

    page.goto("/account/tokens/")
    expect(page.locator("main")).to_contain_text("acme: reviewer")
    page.get_by_label("Name").fill("laptop CLI")
    page.get_by_label("Expires").select_option(label="in 30 days")
    page.get_by_role("button", name="Create token").click()
    raw = page.locator("#new-reviewer-token").inner_text()
    assert raw.startswith("hpr_")
    page.get_by_role("button", name="Copy the new token").click()
    assert page.evaluate("navigator.clipboard.readText()") == raw

    queue = f"{live_server.url}/api/v1/teams/acme/queue"
    assert httpx.get(queue, headers={"Authorization": f"Bearer {raw}"}).status_code == 200

    page.reload()  # posts the form again: nothing is created, the token is not shown again
    expect(page.locator("main")).to_contain_text("That form was already sent")
    expect(page.locator("#new-reviewer-token")).to_have_count(0)
    token = ReviewerToken.objects.get()
    assert token.expires_at is not None
    row = page.get_by_role("row", name=f"{token.prefix}…")
    expect(row).to_contain_text("laptop CLI")
    expect(row).to_contain_text("active")

    page.get_by_role("button", name=f"Revoke {token.prefix}").click()
    expect(page.locator(".flash")).to_contain_text(f"Revoked {token.prefix}…")
    assert httpx.get(queue, headers={"Authorization": f"Bearer {raw}"}).status_code == 401
    expect(page.get_by_role("row", name=f"{token.prefix}…")).to_contain_text("revoked")


def test_the_tokens_page_fits_a_phone(open_page: OpenPage, make_reviewer: Any) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page(width=390, height=844).page
    log_in(page, "rita")
    page.goto("/account/tokens/")
    page.get_by_label("Name").fill("phone")
    page.get_by_role("button", name="Create token").click()

    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
