"""The proposed action in a real browser (issue 11 points 3, 4 and 6): hostile input keys and
values in the tree, the diff, the queue's summary and the edit forms run nothing and create no
element; a reviewer edits and approves; two reviewers editing at once: one wins."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from accounts.models import Team
from approvals.services import step_decide
from envelopes.configuration import tool_configure
from envelopes.models import Step
from envelopes.proposal import input_fingerprint
from tests.approvals.conftest import held_with_input, propose
from tests.browser.conftest import Watched, log_in, screenshot
from tests.conftest import AgentClient, error_envelope

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OpenPage = Callable[..., Watched]

XSS = [
    "<script>window.__pwned=1;alert('script')</script>",
    "<img src=x onerror=\"window.__pwned=1;alert('img')\">",
    "<svg/onload=alert('svg')>",
    '"><a href="javascript:alert(\'href\')" id="xss-link">click</a>',
    "javascript:alert('url')",
    "</textarea><script>alert('textarea')</script>",
    "</details></li></ul></div><img src=x onerror=alert('close')>",
    "{{ request.user }}{% csrf_token %}{% debug %}",
    '<div hx-get="/xss-hx" hx-trigger="load">hx</div>',
    '<button hx-post="/xss-hx" hx-trigger="load" hx-vals=\'{"action":"approve"}\'>b</button>',
    "\u202e<img src=x onerror=alert('bidi')>\u202d",
    "\uff1cscript\uff1ealert('fullwidth')\uff1c/script\uff1e",
    "&lt;script&gt;alert('entities')&lt;/script&gt;",
    '<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>',
    "<style>body{display:none}</style>",
    "<input autofocus onfocus=alert('focus')>",
]
HOSTILE = {
    "amount": 1250,
    **{payload: payload for payload in XSS},
    "nested": {XSS[0]: [XSS[1], {XSS[2]: XSS[3]}], "long": XSS[1] * 5},
}
# Elements the pages' own markup uses inside untrusted boxes: anything else came from agent text.
OUR_TAGS = {"P", "SPAN", "STRONG", "SMALL", "CODE", "UL", "LI", "DETAILS", "SUMMARY", "DIV", "TABLE", "THEAD",
            "TBODY", "TR", "TH", "TD"}  # fmt: skip
FOREIGN = """(ourTags) => {
  const found = [];
  for (const root of document.querySelectorAll('.untrusted, .input-summary')) {
    for (const el of root.querySelectorAll('*')) {
      if (!ourTags.includes(el.tagName)) found.push(el.tagName);
      for (const attr of el.attributes) {
        if (/^(on|hx-|data-hx|href|src|srcdoc|style|formaction|autofocus)/i.test(attr.name)) {
          found.push(el.tagName + '[' + attr.name + ']');
        }
      }
    }
  }
  return found;
}"""


def correct_input(agent: AgentClient, ref: str) -> None:
    body = error_envelope(
        operation_ref=ref,
        tool="charge_card",
        retry={"directive": "after_input_fix", "max_attempts_remaining": 2},
    )
    assert agent.envelope(body).status_code == 201


def nothing_ran(watched: Watched, requests: list[str]) -> None:
    page = watched.page
    page.wait_for_load_state("networkidle")
    assert page.evaluate(FOREIGN, sorted(OUR_TAGS)) == []
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("#xss-link").count() == 0
    assert [url for url in requests if "xss" in url] == []
    assert watched.problems == []  # no dialog, no console error (the fixture checks again)


def watch_requests(page: Page) -> list[str]:
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    return requests


def test_hostile_input_keys_and_values_show_as_text_everywhere(
    open_page: OpenPage, make_reviewer: Any, agent: AgentClient, team: Team
) -> None:
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")
    ref = "run_66/hostile-input"
    propose(agent, ref, {"amount": 5, XSS[0]: "old", "<b>gone</b>": XSS[4]})
    correct_input(agent, ref)
    step = held_with_input(agent, ref, HOSTILE)
    sam = make_reviewer("sam", "reviewer")
    rita_user = make_reviewer("rita", "reviewer")
    edited = {**HOSTILE, "amount": 1000, XSS[5]: XSS[6]}
    step_decide(team=team, step_id=step.pk, actor=sam, action="approve", reason=XSS[7], edited_input=edited)
    assert rita_user is not None

    watched = open_page()
    page = watched.page
    requests = watch_requests(page)
    log_in(page, "rita")

    summary = page.locator(".input-summary").first
    expect(summary).to_contain_text("amount: 1250")
    nothing_ran(watched, requests)

    page.goto(f"/steps/{step.pk}/")
    tree = page.locator("#input-tree")
    for payload in XSS:
        if "\u202e" not in payload:  # hidden characters are written out, see below
            expect(tree).to_contain_text(payload)
    expect(tree).to_contain_text("\\u202e<img src=x onerror=alert('bidi')>\\u202d")
    expect(page.locator("#input-diff")).to_contain_text("/" + XSS[1])  # a JSON Pointer: "/" in a key is "~1"
    expect(page.locator(".edited-approval")).to_contain_text("1 of 2 approvals for an edited input by sam")
    expect(page.locator(".tl-decision")).to_contain_text("Approved an edited input by sam")
    for details in page.locator("details").all():  # open every fold and branch
        if details.get_attribute("open") is None:
            details.locator("summary").first.click()
    nothing_ran(watched, requests)

    # The edit forms hold the input as text: the textarea's value and the hidden field's are the JSON.
    text = page.locator("#edit-input").input_value()
    assert json.loads(text) == HOSTILE
    assert json.loads(page.locator(".edited-approval input[name=input]").input_value()) == edited

    # A refused edit puts the reviewer's hostile text back into the form, as text.
    broken = '{"note": "</textarea><img src=x onerror=alert(\'again\')>", '
    page.locator("#edit-input").fill(broken)
    page.get_by_role("button", name="Edit and approve").click()
    expect(page.locator("#input-error")).to_contain_text("This is not valid JSON")
    assert page.locator("#edit-input").input_value() == broken
    nothing_ran(watched, requests)
    assert Step.objects.get(pk=step.pk).state == "awaiting_approval"


def test_a_reviewer_edits_the_input_and_approves_it(
    open_page: OpenPage, make_reviewer: Any, agent: AgentClient
) -> None:
    ref = "run_67/refund"
    propose(agent, ref, {"amount": 1250, "customer": "cus_9", "reason": "duplicate charge", "order": {"id": "ord_1"}})
    correct_input(agent, ref)
    step = held_with_input(agent, ref, {"amount": 1250, "customer": "cus_9", "order": {"id": "ord_77", "lines": 3}})
    make_reviewer("rita", "reviewer")
    page = open_page().page
    log_in(page, "rita")
    page.goto(f"/steps/{step.pk}/")
    expect(page.locator("#input-diff .diff-removed")).to_contain_text("/reason")
    screenshot(page, "step-proposal.png")

    proposed = {"amount": 1250, "customer": "cus_9", "order": {"id": "ord_77", "lines": 3}}
    expect(page.locator("#input-fingerprint")).to_have_text(input_fingerprint(proposed))
    page.get_by_text("Edit the input before approving").click()
    edited = {**proposed, "amount": 1000}
    page.locator("#edit-input").fill(json.dumps(edited, indent=2))
    page.locator("#edit-reason").fill("Capped at the order total.")
    screenshot(page, "step-edit-approve.png")
    page.get_by_role("button", name="Edit and approve").click()

    expect(page.locator("#decision-feedback")).to_contain_text("Approved with your edits.")
    expect(page.locator(".step-status .state")).to_have_text("retry ready")
    change = page.locator(".tl-decision .diff-changed")
    expect(change).to_contain_text("/amount")
    expect(change).to_contain_text("1250")
    expect(change).to_contain_text("1000")
    step.refresh_from_db()
    assert step.approval_fingerprint == input_fingerprint(edited)


def test_two_reviewers_editing_at_once_one_wins(open_page: OpenPage, make_reviewer: Any, agent: AgentClient) -> None:
    step = held_with_input(agent, "run_68/refund", {"amount": 1250})
    make_reviewer("rita", "reviewer")
    make_reviewer("sam", "reviewer")
    rita, sam = open_page().page, open_page().page
    log_in(rita, "rita")
    log_in(sam, "sam")
    for page, amount in ((rita, 1000), (sam, 900)):
        page.goto(f"/steps/{step.pk}/")
        page.get_by_text("Edit the input before approving").click()
        page.locator("#edit-input").fill(json.dumps({"amount": amount}))

    rita.get_by_role("button", name="Edit and approve").click()
    expect(rita.locator("#decision-feedback")).to_contain_text("Approved with your edits.")
    sam.get_by_role("button", name="Edit and approve").click()

    expect(sam.locator("#decision-feedback")).to_contain_text("Already decided.")
    step.refresh_from_db()
    assert step.approval_fingerprint == input_fingerprint({"amount": 1000})
    assert [d.reviewer.username for d in step.decisions.all()] == ["rita"]
