"""Browser tests: Playwright's sync API driving Debian's Chromium against pytest-django's live
server. Every page is watched for console errors, page errors and dialogs: a payload that ran,
or a CSP violation, fails the test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

# Playwright's sync API runs an event loop in this thread; Django's ORM calls from the test
# body would otherwise be refused as "async unsafe".
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

import pytest
import time_machine
from django.test.utils import override_settings
from django.utils import timezone
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, outage_envelope, post_envelope
from tests.conftest import PASSWORD, AgentClient, error_envelope, unknown_outcome

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def live_server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """pytest-django's live server, built while HTTPS-only settings are off.

    SecurityMiddleware reads SECURE_SSL_REDIRECT and the HSTS settings once, when the server
    thread builds its handler, so a per-test `settings` change comes too late for them."""
    addr = request.config.getvalue("liveserver") or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS") or "localhost"
    with override_settings(SECURE_SSL_REDIRECT=False, SECURE_HSTS_SECONDS=0):
        server = LiveServer(addr)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Module scope, not session: while Playwright's sync API is open it keeps an event loop
    # running in this thread, and later tests that call asyncio.run() would fail.
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=os.environ.get("HOLDPOINT_CHROMIUM", "/usr/bin/chromium"),
            args=CHROMIUM_ARGS,
        )
        yield chromium
        chromium.close()


class Watched:
    """A page plus everything it reported that a user would never want to see."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.page = context.new_page()
        self.problems: list[str] = []
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("dialog", self._on_dialog)

    def _on_console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            where = message.location.get("url", "")
            self.problems.append(f"console {message.type}: {message.text} ({where})")

    def _on_dialog(self, dialog: Any) -> None:
        self.problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()


@pytest.fixture
def open_page(browser: Browser, live_server: Any) -> Iterator[Callable[..., Watched]]:
    """Open a fresh browser context (its own cookies); all of them are checked at teardown."""
    opened: list[Watched] = []

    def open_(width: int = 1280, height: int = 900) -> Watched:
        context = browser.new_context(
            viewport={"width": width, "height": height}, base_url=live_server.url
        )
        watched = Watched(context)
        opened.append(watched)
        return watched

    yield open_
    problems = [problem for watched in opened for problem in watched.problems]
    for watched in opened:
        watched.context.close()
    assert problems == []


def log_in(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")


@pytest.fixture
def seeded(agent: AgentClient, team: Team) -> dict[str, Step]:
    """A team with something in every queue, as a reviewer meets it on a busy morning."""
    tool_configure(team=team, name="wire_transfer", settings={"required_approvals": 2}, actor="test")
    bodies: list[tuple[str, int, dict[str, Any]]] = [
        (
            "escalated",
            125,
            error_envelope(
                tool="update_crm",
                operation_ref="run_80/crm_sync_3",
                code="CONFLICTING_RECORD",
                category="conflict",
                commit_state="not_committed",
                retry={"directive": "never", "max_attempts_remaining": 0},
                next_action="escalate",
                safe_details={"resource_version": "41"},
            ),
        ),
        (
            "invoice",
            41,
            unknown_outcome(
                tool="create_invoice",
                operation_ref="run_81/invoice_9",
                correlation_id="corr-51aa-invoice",
                run_id="run_81",
                agent_message="The billing API timed out after the request was sent.",
            ),
        ),
        (
            "charge",
            12,
            approval_envelope(
                operation_ref="run_81/charge_customer_4411",
                correlation_id="corr-8c1f-charge",
                run_id="run_81",
                safe_details={"limit": "1000", "field": "amount"},
                agent_message="Charge of 1,240.00 EUR is above the 1,000.00 limit; asking for approval.",
                user_message="Your payment needs a quick review before it goes through.",
            ),
        ),
        ("email", 7, error_envelope(operation_ref="run_81/email_receipt", run_id="run_81")),
        ("outage", 5, outage_envelope(tool="sms_gateway", operation_ref="run_83/sms_1")),
        (
            "wire",
            3,
            approval_envelope(
                tool="wire_transfer",
                operation_ref="run_82/wire_supplier_17",
                correlation_id="corr-2b7e-wire",
                run_id="run_82",
                agent_message="Transfer to a new beneficiary; policy requires two approvers.",
            ),
        ),
    ]
    steps = {}
    for key, minutes_ago, body in bodies:
        with time_machine.travel(timezone.now() - timedelta(minutes=minutes_ago), tick=True):
            if key == "outage":
                body["retry"]["not_before"] = later(60)
            steps[key] = post_envelope(agent, body)
    bad = approval_envelope(operation_ref="run_84/refund_2", tool="refund")
    bad["retry"] = {"directive": "sometimes"}
    assert agent.envelope(bad).status_code == 422
    return steps


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def later(minutes: int) -> str:
    return (timezone.now() + timedelta(minutes=minutes)).isoformat()
