"""A team admin in a real browser: an API key created, copied once and revoked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from accounts.models import ApiKey, Team
from envelopes.configuration import tool_configure
from envelopes.models import Tool
from tests.browser.conftest import Watched, log_in
from tests.conftest import AgentClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def test_an_admin_creates_a_key_copies_it_and_revokes_it(open_page: OpenPage, make_reviewer: Any) -> None:
    make_reviewer("ada", "admin")
    watched = open_page()
    watched.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = watched.page
    log_in(page, "ada")

    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name").fill("billing-agent (production)")
    page.get_by_role("button", name="Create key").click()
    raw = page.locator("#new-api-key").inner_text()
    page.get_by_role("button", name="Copy the new API key").click()
    assert page.evaluate("navigator.clipboard.readText()") == raw
    assert AgentClient(raw).get("/api/v1/steps").status_code == 200

    prefix = ApiKey.objects.get(name="billing-agent (production)").prefix
    page.reload()  # posts the form again: nothing is created, the key is not shown again
    expect(page.locator("main")).to_contain_text("That form was already sent")
    expect(page.locator("#new-api-key")).to_have_count(0)
    assert ApiKey.objects.filter(name="billing-agent (production)").count() == 1
    page.get_by_role("button", name=f"Revoke {prefix}").click()
    expect(page.locator(".flash")).to_contain_text(f"Revoked {prefix}…")
    assert AgentClient(raw).get("/api/v1/steps").status_code == 401


def test_the_admin_pages_fit_a_phone(open_page: OpenPage, make_reviewer: Any) -> None:
    make_reviewer("ada", "admin")
    page = open_page(width=390, height=844).page
    log_in(page, "ada")
    for path in ("/keys/", "/webhooks/"):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path


def test_an_admin_changes_a_tools_settings_on_its_page(open_page: OpenPage, make_reviewer: Any, team: Team) -> None:
    tool_configure(team=team, name="send_email", settings={}, actor="test")
    make_reviewer("ada", "admin")
    page = open_page().page
    log_in(page, "ada")
    page.goto("/tools/send_email/")

    settings = page.locator("#settings")
    settings.get_by_label("Attempts at most").fill("5")
    settings.get_by_label("Approvals required").select_option("2")
    settings.get_by_role("button", name="Save settings").click()

    expect(page.locator(".flash")).to_contain_text("Settings of send_email saved.")
    expect(settings.get_by_label("Attempts at most")).to_have_value("5")
    saved = Tool.objects.get(team=team, name="send_email")
    assert (saved.max_attempts, saved.required_approvals) == (5, 2)
