"""Approve and allow similar, in Chromium (contract §11): a reviewer narrows the prefilled
condition, reads it in words as they type and approves with a grant; without JavaScript a changed
condition is shown in words before anything is saved; the pages pass axe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from accounts.models import Team
from envelopes.models import Step
from envelopes.proposal import input_fingerprint
from policy.models import Grant
from tests.approvals.conftest import held_with_input
from tests.browser.axe import assert_accessible
from tests.browser.conftest import Watched, log_in, screenshot
from tests.conftest import AgentClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]
RULE = {
    "name": "refunds-over-500",
    "tools": ["refund"],
    "when": "has(input.amount_cents) && input.amount_cents > 50000",
    "effect": "require_approval",
}


def refund(agent: AgentClient, ref: str, value: dict[str, Any]):  # type: ignore[no-untyped-def]
    return agent.attempt(ref, tool="refund", fingerprint=input_fingerprint(value), input=value, run_id="run_5")


def test_a_reviewer_narrows_the_condition_reads_it_in_words_and_approves_with_a_grant(
    open_page: OpenPage, make_reviewer: Any, agent: AgentClient, team: Team
) -> None:
    first = {"customer": "cus_42", "amount_cents": 80000, "currency": "EUR"}
    held = held_with_input(agent, "run_5/refund_1", first, run_id="run_5")
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    page.goto(f"/steps/{held.pk}/")

    page.get_by_text("Approve and allow similar", exact=True).first.click()  # the summary
    words = page.locator("#grant-words")
    expect(words).to_contain_text('the input\'s customer is "cus_42"')
    expect(words).to_contain_text("the input's amount_cents is")
    assert_accessible(page)

    page.get_by_label("Allow calls when").fill('input.customer == "cus_42"')
    expect(words).not_to_contain_text("amount_cents")  # the words follow the text (htmx)
    page.get_by_label("Scope").select_option("team")
    assert_accessible(page)
    screenshot(page, "step-approve-similar.png")
    page.get_by_role("button", name="Approve and allow similar").click()

    expect(page.locator("#decision-feedback")).to_contain_text("allows similar calls of charge_card")
    grant = Grant.objects.get()
    expect(page.locator("#decision-feedback")).to_contain_text(f"Grant {grant.pk} allows similar calls")
    expect(page.locator(".step-status .state")).to_have_text("retry ready")
    assert (grant.when, grant.scope, grant.created_by) == ('input.customer == "cus_42"', "team", "rita")
    assert_accessible(page)


def test_slacks_approve_and_allow_similar_link_opens_the_grant_form(
    open_page: OpenPage, make_reviewer: Any, agent: AgentClient, team: Team
) -> None:
    # notifications.content links Slack's button to the form's field: Chromium opens the closed
    # <details> it sits in when the fragment points inside it.
    held = held_with_input(agent, "run_6/refund_1", {"customer": "cus_7", "amount_cents": 900}, run_id="run_6")
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    page.goto(f"/steps/{held.pk}/#grant-when")

    expect(page.get_by_label("Allow calls when")).to_be_visible()
    expect(page.get_by_label("Allow calls when")).to_have_value(
        'input.amount_cents == 900 && input.customer == "cus_7"'
    )


def test_a_changed_condition_without_javascript_is_shown_in_words_before_anything_is_saved(
    browser: Any, live_server: Any, make_reviewer: Any, agent: AgentClient, team: Team
) -> None:
    held = held_with_input(agent, "run_5/refund_1", {"customer": "cus_42", "amount_cents": 80000})
    make_reviewer("rita", "reviewer")
    context = browser.new_context(java_script_enabled=False, base_url=live_server.url)
    try:
        page = context.new_page()
        log_in(page, "rita")
        page.goto(f"/steps/{held.pk}/")
        page.get_by_text("Approve and allow similar", exact=True).first.click()
        page.get_by_label("Allow calls when").fill('input.customer == "cus_7"')
        page.get_by_role("button", name="Approve and allow similar").click()

        expect(page.locator("#grant-confirm")).to_contain_text("read it in words above")
        expect(page.locator("#grant-words")).to_contain_text('the input\'s customer is "cus_7"')
        assert not Grant.objects.exists()
        assert Step.objects.get(pk=held.pk).state == "awaiting_approval"
        page.get_by_role("button", name="Approve and allow similar").click()
        page.wait_for_url(f"**/steps/{held.pk}/")
        assert Grant.objects.get().when == 'input.customer == "cus_7"'
    finally:
        context.close()
