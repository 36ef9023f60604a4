"""Edit and approve (contract §7, issue 11 point 4, the form side): a reviewer edits the
proposal's input as JSON and approves it; the form refuses what the approval must never bind."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from approvals.inputs import input_pretty
from envelopes.models import Decision, Step
from envelopes.proposal import INPUT_MAX_BYTES, input_canonical, input_fingerprint
from tests.approvals.conftest import HTMX, approval_envelope, held_with_input, post_envelope
from tests.conftest import AgentClient, logged_in, unknown_outcome

pytestmark = pytest.mark.django_db

REFUND = {"amount": 1250, "currency": "EUR", "customer": "cus_9", "order": "ord_77"}


def edit(client: Client, step: Step, text: str, reason: str = "", **extra: Any):  # type: ignore[no-untyped-def]
    data = {
        "action": "approve",
        "edit": "1",
        "input": text,
        "reason": reason,
        "expected_state": step.state,
        "expected_since": step.state_entered_at.isoformat(),
    }
    return client.post(f"/steps/{step.pk}/decide", data, **extra)


def textarea(html: str) -> str | None:
    match = re.search(r'<textarea id="edit-input" name="input"[^>]*>(.*?)</textarea>', html, re.S)
    return match.group(1) if match else None


@pytest.fixture
def refund(agent: AgentClient) -> Step:
    return held_with_input(agent, "run_5/refund", REFUND)


def test_it_offers_the_input_as_json_to_edit(rita: Client, refund: Step) -> None:
    html = rita.get(f"/steps/{refund.pk}/").content.decode()

    text = textarea(html)
    assert text is not None
    assert json.loads(text.replace("&quot;", '"')) == REFUND
    assert (
        '<button type="submit" name="action" value="approve" class="act act-edit_approve">Edit and approve</button>'
        in html
    )


@pytest.mark.parametrize(
    ("tool_input", "why"),
    [(None, "the agent sent no input"), ({"password": "hunter2", "amount": 3}, "the input was redacted")],
)
def test_it_is_not_offered_without_a_readable_input(
    rita: Client, agent: AgentClient, tool_input: dict[str, Any] | None, why: str
) -> None:
    step = held_with_input(agent, "run_5/unreadable", tool_input)

    html = rita.get(f"/steps/{step.pk}/").content.decode()

    assert "Edit and approve" not in html, why
    assert ">Approve</button>" in html


def test_it_is_not_offered_without_an_attempt_or_outside_awaiting_approval(rita: Client, agent: AgentClient) -> None:
    no_attempt = post_envelope(agent, approval_envelope(operation_ref="run_5/no-attempt"))
    agent.attempt("run_5/verify", tool="create_invoice", fingerprint=input_fingerprint({"a": 1}), input={"a": 1})
    verifying = post_envelope(agent, unknown_outcome(tool="create_invoice", operation_ref="run_5/verify"))

    for step in (no_attempt, verifying):
        assert "Edit and approve" not in rita.get(f"/steps/{step.pk}/").content.decode()


def test_an_edited_approval_binds_the_edited_input(rita: Client, agent: AgentClient, refund: Step) -> None:
    edited = {**REFUND, "amount": 1000}

    response = edit(rita, refund, json.dumps(edited, indent=2), "capped at the order total", follow=True)

    refund.refresh_from_db()
    assert (refund.state, refund.reason) == ("retry_ready", "approved")
    decision = Decision.objects.get(step=refund)
    assert (decision.edited, decision.edited_input, decision.input_fingerprint) == (
        True,
        edited,
        input_fingerprint(edited),
    )
    html = response.content.decode()
    assert "Approved with your edits." in html
    directive = agent.step("run_5/refund").json()["directive"]
    assert (directive["input"], directive["input_fingerprint"]) == (edited, input_fingerprint(edited))
    # The timeline says what the edit changed.
    entry = re.search(r'<li class="tl tl-decision">.*?</li>\s*</ul>', html, re.S)
    assert entry and "Approved an edited input</strong> by rita" in entry.group(0)
    assert re.search(
        r'<li class="diff-changed"><span class="diff-kind">changed</span> <code class="diff-path">/amount</code>\s*'
        r'<span class="diff-old">1250</span> <span aria-label="became">→</span> <span class="diff-new">1000</span>',
        entry.group(0),
    )


def test_an_edit_that_changes_nothing_approves_the_proposal(rita: Client, refund: Step) -> None:
    response = edit(rita, refund, json.dumps(REFUND), **HTMX)

    assert "Your edit changed nothing, so you approved the agent&#x27;s input." in response.content.decode()
    decision = Decision.objects.get(step=refund)
    assert (decision.edited, decision.input_fingerprint) == (False, input_fingerprint(REFUND))


BAD_INPUTS = [
    (
        '{"amount": 1000,',
        "This is not valid JSON: Expecting property name enclosed in double quotes (line 1, column 17)",
    ),
    ('[{"amount": 1000}]', "The input must be a JSON object"),
    ('"amount"', "The input must be a JSON object"),
    ("", "The input is empty"),
    ('{"amount": 1, "amount": 2}', "the key &quot;amount&quot; appears twice in one object"),
    ('{"amount": NaN}', "NaN is not a JSON number"),
    ('{"amount": 1e400}', "has no RFC 8785 canonical form"),
    ('{"amount": 9007199254740993}', "has no RFC 8785 canonical form"),
    (json.dumps({"memo": "x" * INPUT_MAX_BYTES}), f"at most {INPUT_MAX_BYTES} are accepted"),
    ("[" * 40 + "]" * 40, "The input must be a JSON object"),
    (
        json.dumps({"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}),
        "nests objects and arrays more than 32",
    ),
    (json.dumps({"note": "key AKIAIOSFODNN7EXAMPLE here"}), "looks like a secret"),
    (json.dumps({"customer": {"api_key": "abc"}}), "looks like a secret"),
    (json.dumps({"items": [{"memo": "Bearer abcdefghijklmnopqrstuvwxyz0123456789"}]}), "looks like a secret"),
    (json.dumps({"payload": json.dumps({"password": "hunter2"})}), "looks like a secret"),
]


@pytest.mark.parametrize(("text", "message"), BAD_INPUTS)
def test_the_form_refuses_what_an_approval_must_not_bind(rita: Client, refund: Step, text: str, message: str) -> None:
    plain = edit(rita, refund, text)
    htmx = edit(rita, refund, text, **HTMX)

    assert plain.status_code == 422
    for response in (plain, htmx):
        html = response.content.decode()
        error = re.search(r'<p class="field-error" id="input-error" role="alert">([^<]*)</p>', html)
        assert error and message in error.group(1), html[:0]
        assert 'id="edit-approve" open' in html  # the form stays open ...
        assert textarea(html) is not None  # ... with the reviewer's text in it
    refund.refresh_from_db()
    assert refund.state == "awaiting_approval"
    assert not Decision.objects.exists()


def test_a_refused_edit_keeps_the_reviewers_text_escaped(rita: Client, refund: Step) -> None:
    text = '{"note": "</textarea><script>alert(1)</script>", '

    html = edit(rita, refund, text, **HTMX).content.decode()

    assert textarea(html) == "{&quot;note&quot;: &quot;&lt;/textarea&gt;&lt;script&gt;alert(1)&lt;/script&gt;&quot;, "
    assert "<script>alert(1)" not in html


def test_four_eyes_counts_the_edit_apart_and_a_second_reviewer_approves_it(
    four_eyes_tool: None, rita: Client, agent: AgentClient, second_reviewer: Any
) -> None:
    step = held_with_input(agent, "run_5/four-eyes", REFUND)
    edited = {**REFUND, "amount": 900}

    first = edit(rita, step, json.dumps(edited), **HTMX).content.decode()

    assert "Your approval of your edited input is recorded (1 of 2)." in first
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    sam = logged_in(second_reviewer)
    page = sam.get(f"/steps/{step.pk}/").content.decode()
    assert "<strong>0 of 2 approvals</strong>." in page  # for the agent's input
    assert "<strong>1 of 2 approvals</strong> for an edited input by rita" in page
    queue = sam.get("/").content.decode()
    assert re.search(r'<td data-label="Approvals">0 of 2<br><small class="muted">\+ 1 edited input with one', queue)
    hidden = re.search(r'<input type="hidden" name="input" value="([^"]*)">', page)
    assert hidden and json.loads(hidden.group(1).replace("&quot;", '"')) == edited

    second = edit(sam, step, hidden.group(1).replace("&quot;", '"'), **HTMX).content.decode()

    assert "Approved with your edits." in second
    step.refresh_from_db()
    assert (step.state, step.approval_fingerprint) == ("retry_ready", input_fingerprint(edited))


def test_a_second_reviewer_on_a_stale_page_is_told_it_was_already_decided(
    rita: Client, refund: Step, second_reviewer: Any
) -> None:
    sam = logged_in(second_reviewer)
    stale = Step.objects.get(pk=refund.pk)

    edit(rita, refund, json.dumps({**REFUND, "amount": 1}), **HTMX)
    late = edit(sam, stale, json.dumps({**REFUND, "amount": 2}), **HTMX).content.decode()

    assert "<strong>Already decided.</strong>" in late
    assert list(Decision.objects.values_list("reviewer__username", "edited_input")) == [
        ("rita", {**REFUND, "amount": 1})
    ]


def test_a_viewer_cannot_edit_and_approve(viewer: Any, refund: Step) -> None:
    client = logged_in(viewer)

    assert "Edit and approve" not in client.get(f"/steps/{refund.pk}/").content.decode()
    assert edit(client, refund, json.dumps(REFUND)).status_code == 403
    assert not Decision.objects.exists()


def test_an_edited_input_only_goes_with_an_approval(rita: Client, refund: Step) -> None:
    data = {
        "action": "reject",
        "edit": "1",
        "input": json.dumps(REFUND),
        "reason": "no",
        "expected_state": refund.state,
    }

    response = rita.post(f"/steps/{refund.pk}/decide", data)

    assert response.status_code == 422
    assert "An edited input can only be approved." in response.content.decode()
    assert not Decision.objects.exists()


def test_an_input_near_the_limit_is_edited_from_its_indented_json(rita: Client, agent: AgentClient) -> None:
    rows = [{"a": {"b": {"c": i}}} for i in range(1450)]
    step = held_with_input(agent, "run_5/big", {"rows": rows})
    text = textarea(rita.get(f"/steps/{step.pk}/").content.decode())
    assert text is not None
    edited = {"rows": [*rows[:-1], {"a": {"b": {"c": -1}}}]}
    edited_text = input_pretty(edited)
    assert len(input_canonical(edited)) > 30 * 1024 and len(edited_text.encode()) > 100 * 1024

    response = edit(rita, step, edited_text, "the last row", **HTMX)  # multipart, as the form posts it

    assert "Approved with your edits." in response.content.decode()
    step.refresh_from_db()
    assert step.approval_fingerprint == input_fingerprint(edited)
