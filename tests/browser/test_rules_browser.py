"""A team admin edits the rules in Chromium: writes a draft, tests it against history, sees what
would change, saves it; the rules page shows a shadow rule's counts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from accounts.models import Team
from envelopes.proposal import input_fingerprint
from policy.models import Rule, RuleTally
from rules.services import rule_set_replace
from tests.browser.conftest import Watched, log_in
from tests.conftest import AgentClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]

DRAFT = """\
rules:
- name: big-refunds
  tools: [issue_refund]
  when: 'has(input.amount_cents) && input.amount_cents > 50000'
  effect: require_approval
- name: internal-mail
  tools: [send_email]
  when: 'input.to.endsWith("@example.com")'
  effect: allow
  mode: shadow
"""


def _history(agent: AgentClient) -> None:
    for number, cents in enumerate([90000, 1200, 70000]):
        payload = {"order": f"ord_{number}", "amount_cents": cents}
        response = agent.attempt(
            f"run_8/refund_{number}", tool="issue_refund", fingerprint=input_fingerprint(payload), input=payload
        )
        assert response.status_code == 201, response.content


def test_an_admin_tests_a_draft_against_history_and_saves_it(
    open_page: OpenPage, make_reviewer: Any, agent: AgentClient, team: Team
) -> None:
    _history(agent)
    make_reviewer("ada", "admin")
    page = open_page().page
    log_in(page, "ada")

    page.get_by_role("link", name="Rules", exact=True).click()
    expect(page.locator("main")).to_contain_text("No rules yet")
    page.get_by_role("link", name="Edit the set").click()
    page.get_by_label("The rules").fill(DRAFT)
    page.get_by_role("button", name="Test against history").click()

    result = page.locator("#editor-result")
    expect(result).to_contain_text("3 attempts of issue_refund, send_email")
    expect(result.locator('[data-outcome="held"]')).to_have_text("2")
    expect(result).to_contain_text("2 from granted, no rule acted to held for approval")
    expect(result).to_contain_text("run_8/refund_0")
    expect(page.locator("#rules-diff")).to_contain_text("+- name: big-refunds")
    assert not Rule.objects.filter(team=team).exists()  # a test saves nothing

    page.get_by_role("button", name="Save as version 1").click()
    page.wait_for_url("**/rules/?team=acme")
    expect(page.locator(".flash")).to_contain_text("Saved version 1 of the rules (added big-refunds, internal-mail)")
    expect(page.locator("#rule-big-refunds")).to_contain_text("require_approval")
    expect(page.locator("#rule-versions")).to_contain_text("v1")
    assert list(Rule.objects.filter(team=team).values_list("name", flat=True)) == ["big-refunds", "internal-mail"]


def test_an_edit_after_the_test_must_be_tested_again(open_page: OpenPage, make_reviewer: Any, team: Team) -> None:
    make_reviewer("ada", "admin")
    page = open_page().page
    log_in(page, "ada")
    page.goto("/rules/edit?team=acme")
    page.get_by_label("The rules").fill(DRAFT)
    page.get_by_role("button", name="Test against history").click()
    expect(page.get_by_role("button", name="Save as version 1")).to_be_visible()
    page.get_by_label("The rules").fill(DRAFT.replace("50000", "60000"))
    page.get_by_role("button", name="Save as version 1").click()
    expect(page.locator("main")).to_contain_text("Test this draft against history before saving it")
    assert not Rule.objects.filter(team=team).exists()


def test_a_shadow_rules_counts_show_on_the_rules_page(open_page: OpenPage, make_reviewer: Any, team: Team) -> None:
    rule_set_replace(
        team=team,
        rules=[{"name": "internal-mail", "tools": ["send_email"], "when": "true", "effect": "allow", "mode": "shadow"}],
        actor="test",
        if_version=None,
        via="test",
    )
    rule = Rule.objects.get(team=team)
    today = timezone.now().date()
    RuleTally.objects.create(rule=rule, team=team, tool="send_email", day=today, would_match=7, errors=1)
    make_reviewer("vic", "viewer")
    page = open_page().page
    log_in(page, "vic")
    page.goto("/rules/")
    panel = page.locator("#rule-internal-mail")
    expect(panel).to_contain_text("shadow")
    expect(panel.locator('.rule-total[data-kind="would-match"]')).to_have_text("7")
    expect(panel.locator(".rule-errors")).to_have_text("1")
    expect(panel.locator(".chart-legend")).to_contain_text("would-be matches (shadow): 7")
    expect(page.get_by_role("link", name="Edit the set")).to_have_count(0)
