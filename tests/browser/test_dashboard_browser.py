"""The reviewer's day in a real browser: log in, find, decide, four eyes, viewers, hostile text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from accounts.models import Membership
from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.browser.conftest import Watched, log_in, screenshot
from tests.conftest import AgentClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]


def test_a_reviewer_finds_a_step_by_correlation_id_and_approves_it(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")

    expect(page.get_by_role("heading", name="Review queues")).to_be_visible()
    expect(page.locator("#approvals tbody tr")).to_have_count(2)
    expect(page.locator("#queue-counts")).to_contain_text("Approvals 2")
    screenshot(page, "queue.png")

    page.get_by_label("Search steps").fill("corr-8c1f-charge")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url(f"**/steps/{seeded['charge'].pk}/")
    expect(page.get_by_role("heading", level=1)).to_have_text("run_81/charge_customer_4411")
    expect(page.locator(".untrusted").first).to_be_visible()
    screenshot(page, "step.png")

    page.get_by_label("Reason").fill("Customer confirmed the amount by phone.")
    page.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator("#decision-feedback")).to_contain_text("Approved.")
    expect(page.locator(".step-status .state")).to_have_text("retry ready")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(page.locator(".tl-decision")).to_contain_text("Customer confirmed the amount by phone.")
    step = Step.objects.get(pk=seeded["charge"].pk)
    assert (step.state, step.reason) == ("retry_ready", "approved")


def test_a_reviewer_rejects_with_a_reason_and_a_missing_reason_is_caught(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    page.goto(f"/steps/{seeded['charge'].pk}/")

    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#reason-error")).to_have_text("A reason is required for this decision.")
    assert Step.objects.get(pk=seeded["charge"].pk).state == "awaiting_approval"

    page.get_by_label("Reason").fill("Duplicate of run_80's charge.")
    page.get_by_role("button", name="Reject").click()

    expect(page.locator("#decision-feedback")).to_contain_text("Rejected. The step is cancelled.")
    expect(page.locator(".step-status .state")).to_have_text("cancelled")
    assert Step.objects.get(pk=seeded["charge"].pk).state == "cancelled"


def test_a_stale_page_is_told_already_decided(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    make_reviewer("sam", "reviewer")
    rita, sam = open_page().page, open_page().page
    log_in(rita, "rita")
    log_in(sam, "sam")
    rita.goto(f"/steps/{seeded['invoice'].pk}/")
    sam.goto(f"/steps/{seeded['invoice'].pk}/")

    sam.get_by_label("Reason").fill("Ledger shows invoice INV-9.")
    sam.get_by_role("button", name="Mark committed").click()
    expect(sam.locator("#decision-feedback")).to_contain_text("Marked committed.")

    rita.get_by_label("Reason").fill("Billing says it never arrived.")
    rita.get_by_role("button", name="Permit retry").click()
    expect(rita.locator("#decision-feedback")).to_contain_text("Already decided.")
    expect(rita.locator("#decision-feedback")).to_contain_text("succeeded")
    assert Step.objects.get(pk=seeded["invoice"].pk).state == "succeeded"


def test_four_eyes_needs_two_different_reviewers(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    make_reviewer("sam", "reviewer")
    wire = seeded["wire"]
    rita = open_page().page
    log_in(rita, "rita")
    rita.goto(f"/steps/{wire.pk}/")
    expect(rita.locator(".four-eyes")).to_contain_text("0 of 2 approvals")

    rita.get_by_role("button", name="Approve", exact=True).click()
    expect(rita.locator("#decision-feedback")).to_contain_text("Your approval is recorded (1 of 2)")
    expect(rita.locator(".four-eyes")).to_contain_text("1 of 2 approvals: approved by rita")
    expect(rita.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    assert Step.objects.get(pk=wire.pk).state == "awaiting_approval"

    sam = open_page().page
    log_in(sam, "sam")
    sam.goto(f"/steps/{wire.pk}/")
    sam.get_by_label("Reason").fill("Beneficiary verified with the supplier.")
    sam.get_by_role("button", name="Approve", exact=True).click()
    expect(sam.locator("#decision-feedback")).to_contain_text("Approved.")
    assert Step.objects.get(pk=wire.pk).state == "retry_ready"


def test_a_viewer_sees_no_decision_buttons(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("vic", "viewer")
    page = open_page().page
    log_in(page, "vic")

    expect(page.get_by_role("button", name="Resume tool")).to_have_count(0)
    page.goto(f"/steps/{seeded['charge'].pk}/")
    expect(page.get_by_text("deciding needs the reviewer role")).to_be_visible()
    for label in ("Approve", "Reject", "Mark committed", "Permit retry", "Cancel step"):
        expect(page.get_by_role("button", name=label, exact=True)).to_have_count(0)
    expect(page.locator("textarea[name=reason]")).to_have_count(0)


def test_hostile_agent_text_shows_as_text_and_runs_nothing(
    open_page: OpenPage, make_reviewer: Any, agent: AgentClient
) -> None:
    payload = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
    step = post_envelope(
        agent,
        approval_envelope(
            operation_ref="run_66/hostile",
            agent_message=payload,
            user_message='<button hx-post="/tools/x/resume" hx-trigger="load">free</button>',
            safe_details={"field": '<img src=x onerror="window.__pwned=1">'},
        ),
    )
    make_reviewer("rita", "reviewer")
    watched = open_page()
    page = watched.page
    log_in(page, "rita")
    page.goto(f"/steps/{step.pk}/")
    page.locator(".tl-untrusted summary").click()  # open the timeline's copy too
    page.wait_for_timeout(500)

    message = page.locator(".untrusted", has_text="agent_message").first
    expect(message).to_contain_text(payload)
    expect(message).to_contain_text("untrusted agent text")
    assert page.locator(".untrusted img").count() == 0
    assert page.locator(".untrusted script").count() == 0
    assert page.locator(".untrusted button").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert watched.problems == []


def test_the_queues_update_live_without_a_reload(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step], agent: AgentClient
) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    page.evaluate("window.__same_page = true")
    expect(page.locator("#approvals tbody tr")).to_have_count(2)

    post_envelope(agent, approval_envelope(operation_ref="run_90/late_arrival"))

    expect(page.locator("#approvals")).to_contain_text("run_90/late_arrival", timeout=12_000)
    expect(page.locator("#queue-counts")).to_contain_text("Approvals 3", timeout=12_000)
    assert page.evaluate("window.__same_page") is True


def test_the_correlation_id_copies_in_one_click(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    watched = open_page()
    watched.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = watched.page
    log_in(page, "rita")
    page.goto(f"/steps/{seeded['charge'].pk}/")

    page.get_by_role("button", name="Copy correlation id").click()

    expect(page.get_by_role("button", name="Copy correlation id")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "corr-8c1f-charge"


def test_cancel_all_for_a_halted_tool_from_the_queue(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")

    halted = page.locator("#halted")
    expect(halted).to_contain_text("sms_gateway")
    halted.get_by_text("Cancel all held steps…").click()
    halted.get_by_label("Reason").fill("SMS provider outage; agents will re-plan.")
    # The queues refresh every 5 s; the half-filled form must survive a refresh.
    updated = page.locator("#queues .live time")
    before = updated.get_attribute("datetime") or ""
    expect(updated).not_to_have_attribute("datetime", before, timeout=12_000)
    expect(halted.get_by_label("Reason")).to_have_value("SMS provider outage; agents will re-plan.")
    halted.get_by_role("button", name="Cancel all held steps").click()

    expect(page.locator(".flash")).to_contain_text("Cancelled 1 held step of sms_gateway.")
    assert Step.objects.get(pk=seeded["outage"].pk).state == "cancelled"


def test_the_pages_fit_a_phone(open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page(width=390, height=844).page
    log_in(page, "rita")

    for path, shot in (("/", "queue-phone.png"), (f"/steps/{seeded['charge'].pk}/", "step-phone.png")):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
        screenshot(page, shot)
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()


def test_the_keyboard_reaches_the_skip_link_first(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")

    page.keyboard.press("Tab")

    focused = page.evaluate("document.activeElement.textContent")
    assert focused == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


def test_a_reviewer_demoted_to_viewer_is_refused_and_told_so(
    open_page: OpenPage, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    watched = open_page()
    page = watched.page
    log_in(page, "rita")
    page.goto(f"/steps/{seeded['charge'].pk}/")
    Membership.objects.filter(user__username="rita").update(role="viewer")

    page.get_by_label("Reason").fill("Looks fine to me.")
    page.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator("#htmx-problem")).to_have_text(
        "You are not allowed to do that. Reload the page to see where things stand."
    )
    assert Step.objects.get(pk=seeded["charge"].pk).state == "awaiting_approval"
    # htmx logs the refused answer to the console; that one is expected here.
    watched.problems = [p for p in watched.problems if "403" not in p and "Response Status Error" not in p]


def test_deciding_works_without_javascript(
    browser: Any, live_server: Any, make_reviewer: Any, seeded: dict[str, Step]
) -> None:
    make_reviewer("rita", "reviewer")
    context = browser.new_context(java_script_enabled=False, base_url=live_server.url)
    try:
        page = context.new_page()
        log_in(page, "rita")
        expect(page.locator("#approvals tbody tr")).to_have_count(2)
        page.goto(f"/steps/{seeded['charge'].pk}/")
        page.get_by_label("Reason").fill("Not authorised by the customer.")
        page.get_by_role("button", name="Reject").click()

        page.wait_for_url(f"**/steps/{seeded['charge'].pk}/")
        expect(page.locator(".flash")).to_contain_text("Rejected. The step is cancelled.")
        expect(page.locator(".step-status .state")).to_have_text("cancelled")
    finally:
        context.close()
    assert Step.objects.get(pk=seeded["charge"].pk).state == "cancelled"
