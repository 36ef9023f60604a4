"""Every page passes axe-core in Chromium with no violation: each page route a signed-in member
can open (tests/odd_input.py's PAGE_ROUTES, held to the URLconf, so a new page is checked the
day it is added), the step page in each state a reviewer meets, and the pages as htmx leaves
them after a click."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from accounts.models import Team
from envelopes.models import Quarantine, Step
from policy.services import rules_replace
from tests.approvals.conftest import held_with_input
from tests.browser.axe import assert_accessible, axe_violations
from tests.browser.conftest import Watched, log_in
from tests.conftest import AgentClient
from tests.odd_input import PAGE_ROUTES

RULE = {"name": "big-refunds", "tools": ["refund"], "when": "input.amount > 500", "effect": "require_approval"}

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]

# Pages that need a query to show something: a rule set's version.
QUERIES = {"rules:version": "?version=1"}
# Routes that answer no HTML page of their own: a fragment htmx swaps in, and Prometheus text.
NOT_PAGES = {"approvals:queue-counts", "metrics-prometheus"}


def _violations_by_page(page: Page, paths: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in paths:
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        violations = axe_violations(page)
        if violations:
            found[path] = [f"{v['id']} ({v['impact']}): {v['nodes']}" for v in violations]
    return found


def test_every_page_route_passes_axe(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step], team: Team
) -> None:
    make_reviewer("ada", "admin")
    rules_replace(team=team, rules=[RULE], actor="ada", if_version=None)
    segments = {
        "pk": {
            "approvals:step": seeded["charge"].pk,
            "approvals:quarantine-detail": Quarantine.objects.get().pk,
        },
        "tool": {"approvals:tool-incident": "sms_gateway", "metrics-tool": "refund"},
        "team": {"approvals:team-groups": team.slug},
    }
    paths = []
    for name, route in sorted(PAGE_ROUTES.items()):
        if name in NOT_PAGES:
            continue
        values = {field: segments[field][name] for field in ("pk", "tool", "team") if "{" + field + "}" in route.path}
        paths.append(route.path.format(**values) + QUERIES.get(name, ""))
    paths.append("/search?q=run_81")  # the list of matches, not a redirect

    anonymous = open_page().page
    found = _violations_by_page(anonymous, ["/accounts/login/"])
    page = open_page().page
    log_in(page, "ada")
    found |= _violations_by_page(page, paths)
    assert found == {}, "\n".join(f"{path}: {problems}" for path, problems in found.items())


def test_the_step_page_passes_axe_in_every_state_a_reviewer_meets(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    states = {key: step.state for key, step in seeded.items()}
    assert set(states.values()) >= {"awaiting_approval", "verifying", "escalated", "needs_input"}
    paths = [f"/steps/{step.pk}/" for step in seeded.values()]
    found = _violations_by_page(page, paths)
    assert found == {}, "\n".join(f"{path}: {problems}" for path, problems in found.items())


def test_pages_pass_axe_after_htmx_swaps(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step], agent: AgentClient
) -> None:
    proposed = held_with_input(agent, "run_90/refund_1", {"customer": "cus_9", "amount": 1250})
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")

    page.goto(f"/steps/{proposed.pk}/")
    page.get_by_text("Edit the input before approving").click()
    expect(page.locator("#edit-input")).to_be_visible()
    page.locator("#edit-input").fill("{not json")
    page.get_by_role("button", name="Edit and approve").click()
    expect(page.locator("#input-error")).to_contain_text("This is not valid JSON")
    assert_accessible(page)

    page.goto(f"/steps/{seeded['charge'].pk}/")
    page.get_by_label("Reason").fill("Customer confirmed the amount by phone.")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#decision-feedback")).to_contain_text("Approved.")
    assert_accessible(page)

    page.goto("/")
    page.get_by_label("Tool").first.select_option("create_invoice")
    page.get_by_role("button", name="Filter").first.click()
    expect(page.locator("#verifications tbody tr")).to_have_count(1)
    assert_accessible(page)
