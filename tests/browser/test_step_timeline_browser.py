"""The step page's timeline in Chromium: the latest 50 events, "Show older" in place, a poll that
leaves the page alone while nothing changed and keeps the opened history when something did; and
the same history without JavaScript."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Response, expect

from accounts.models import Team
from envelopes import services
from envelopes.models import Step
from tests.browser.conftest import Watched, log_in
from tests.conftest import error_envelope, success_envelope

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def ingest(team: Team, body: dict[str, Any], now: Any) -> None:
    services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode(), now=now)


@pytest.fixture
def busy(team: Team) -> Step:
    """A closed step with 120 timeline events: its error, the success and its two transitions,
    then 116 envelopes that came after it closed, a second apart."""
    start = timezone.now() - timedelta(hours=1)
    ingest(team, error_envelope(operation_ref="busy/7"), start)
    ingest(team, success_envelope(operation_ref="busy/7"), start + timedelta(seconds=1))
    for n in range(116):
        ingest(
            team,
            success_envelope(operation_ref="busy/7", correlation_id=f"late-{n:03}"),
            start + timedelta(seconds=2 + n),
        )
    return Step.objects.get(operation_ref="busy/7")


def test_show_older_opens_history_in_place_and_the_poll_keeps_it(
    open_page: OpenPage, make_reviewer: Any, team: Team, busy: Step
) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    polls: list[int] = []

    def on_response(response: Response) -> None:
        if response.request.headers.get("hx-target") == "step-live":
            polls.append(response.status)

    page.on("response", on_response)
    page.goto(f"/steps/{busy.pk}/")
    page.evaluate("window.__same_page = true")
    entries = page.locator("#step-live ol.timeline > li.tl:not(.tl-older)")
    expect(entries).to_have_count(50)
    expect(entries.last).to_contain_text("late-115")

    page.get_by_role("link", name="Show older events").click()
    expect(entries).to_have_count(100)
    expect(page.get_by_role("link", name="Show older events")).to_be_visible()
    page.get_by_role("link", name="Show older events").click()
    expect(entries).to_have_count(120)
    expect(page.get_by_role("link", name="Show older events")).to_have_count(0)
    assert page.url.endswith(f"/steps/{busy.pk}/")

    # Nothing changes: the polls answer 204 and the opened history stays.
    page.wait_for_timeout(11_000)
    assert polls and set(polls) == {204}, polls
    expect(entries).to_have_count(120)

    ingest(team, success_envelope(operation_ref="busy/7", correlation_id="newest-one"), timezone.now())

    expect(entries.last).to_contain_text("newest-one", timeout=12_000)
    expect(entries).to_have_count(121)
    assert 200 in polls
    assert page.evaluate("window.__same_page") is True


def test_older_events_open_as_pages_without_javascript(
    browser: Any, live_server: Any, make_reviewer: Any, busy: Step
) -> None:
    make_reviewer("rita", "reviewer")
    context = browser.new_context(java_script_enabled=False, base_url=live_server.url)
    try:
        page = context.new_page()
        log_in(page, "rita")
        page.goto(f"/steps/{busy.pk}/")
        entries = page.locator("#step-live ol.timeline > li.tl:not(.tl-older)")
        expect(entries).to_have_count(50)

        page.get_by_role("link", name="Show older events").click()

        page.wait_for_url("**/?before=*")
        expect(entries).to_have_count(50)
        expect(entries.last).to_contain_text("late-065")
        page.get_by_role("link", name="Show older events").click()
        expect(entries).to_have_count(20)
        expect(page.get_by_role("link", name="Show older events")).to_have_count(0)
        page.get_by_role("link", name="Back to the latest events").click()
        expect(entries.last).to_contain_text("late-115")
    finally:
        context.close()
