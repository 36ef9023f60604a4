"""POST /steps/<pk>/decide: decisions through the state machine, for plain forms and htmx."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from envelopes.models import AuditEvent, Decision, Step
from tests.approvals.conftest import HTMX, approval_envelope
from tests.conftest import logged_in

pytestmark = pytest.mark.django_db


def decide(client: Client, step: Step, action: str, reason: str = "", expected: str | None = None, **extra: Any):  # type: ignore[no-untyped-def]
    data = {"action": action, "reason": reason, "expected_state": expected or step.state}
    return client.post(f"/steps/{step.pk}/decide", data, **extra)


def transitions(step: Step) -> list[tuple[str, str]]:
    return list(AuditEvent.objects.filter(step=step, kind="transition").order_by("seq").values_list("before", "after"))


def test_a_plain_approve_redirects_to_the_step_with_a_flash(rita: Client, awaiting: Step) -> None:
    response = decide(rita, awaiting, "approve", "within the customer's budget")

    assert response.status_code == 303
    assert response["Location"] == f"/steps/{awaiting.pk}/"
    awaiting.refresh_from_db()
    assert (awaiting.state, awaiting.reason) == ("retry_ready", "approved")
    decision = Decision.objects.get(step=awaiting)
    assert (decision.action, decision.reason, decision.reviewer.username) == (
        "approve",
        "within the customer's budget",
        "rita",
    )
    flash = [str(m) for m in get_messages(response.wsgi_request)]
    assert flash == ["Approved. The agent may now make one attempt with the approved input."]


def test_the_flash_shows_on_the_page_after_the_redirect(rita: Client, awaiting: Step) -> None:
    response = decide(rita, awaiting, "reject", "duplicate charge", follow=True)

    html = response.content.decode()
    assert "Rejected. The step is cancelled." in html
    assert '<span class="state state-cancelled">cancelled</span>' in html


def test_an_htmx_decision_answers_with_the_rerendered_fragment(rita: Client, awaiting: Step) -> None:
    response = decide(rita, awaiting, "reject", "customer asked to stop", **HTMX)

    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="step-detail"')
    assert "<html" not in html
    assert "Rejected. The step is cancelled." in html
    assert "Nothing to decide: the step is closed (cancelled)." in html
    assert json.loads(response["HX-Trigger"]) == {"queues-changed": {}}
    awaiting.refresh_from_db()
    assert awaiting.state == "cancelled"


def test_verification_decisions_move_the_step(rita: Client, verifying: Step) -> None:
    decide(rita, verifying, "mark_committed", "invoice INV-7 exists in the ledger")

    verifying.refresh_from_db()
    assert (verifying.state, verifying.reason) == ("succeeded", "resolved_committed")


def test_a_reason_is_required_to_reject(rita: Client, awaiting: Step) -> None:
    plain = decide(rita, awaiting, "reject", "   ")
    assert plain.status_code == 422
    assert "A reason is required for this decision." in plain.content.decode()

    htmx = decide(rita, awaiting, "reject", "", **HTMX)
    assert htmx.status_code == 200
    assert 'aria-invalid="true"' in htmx.content.decode()

    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"
    assert not Decision.objects.exists()


def test_a_stale_page_is_told_already_decided_and_nothing_moves_twice(
    rita: Client, awaiting: Step, second_reviewer: Any
) -> None:
    sam = logged_in(second_reviewer)
    decide(sam, awaiting, "reject", "not this one")  # sam decides first

    plain = decide(rita, awaiting, "approve", "looks fine", expected="awaiting_approval")
    assert plain.status_code == 303
    flash = [str(m) for m in get_messages(plain.wsgi_request)]
    assert flash == ["Already decided: the step is now cancelled (rejected)."]

    htmx = decide(rita, awaiting, "cancel", "stop", expected="awaiting_approval", **HTMX)
    html = htmx.content.decode()
    assert "<strong>Already decided.</strong> The step is now cancelled (rejected). Nothing was changed." in html
    assert 'role="alert"' in html

    awaiting.refresh_from_db()
    assert awaiting.state == "cancelled"
    assert transitions(awaiting) == [("", "awaiting_approval"), ("awaiting_approval", "cancelled")]
    assert list(Decision.objects.values_list("reviewer__username", "action")) == [("sam", "reject")]


def test_an_action_the_state_does_not_allow_changes_nothing(rita: Client, awaiting: Step) -> None:
    response = decide(rita, awaiting, "mark_committed", "it went through")

    assert response.status_code == 303
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"
    assert not Decision.objects.exists()


def test_four_eyes_needs_two_distinct_reviewers(
    four_eyes_tool: None, rita: Client, awaiting: Step, second_reviewer: Any
) -> None:
    first = decide(rita, awaiting, "approve", "ok by me", **HTMX)
    assert "Your approval is recorded (1 of 2)" in first.content.decode()
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"

    again = decide(rita, awaiting, "approve", "really ok", **HTMX)
    assert "You already approved this input; a second reviewer must approve it." in again.content.decode()
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"
    assert Decision.objects.filter(step=awaiting, action="approve").count() == 1

    decide(logged_in(second_reviewer), awaiting, "approve", "second pair of eyes")
    awaiting.refresh_from_db()
    assert (awaiting.state, awaiting.reason) == ("retry_ready", "approved")
    assert transitions(awaiting) == [("", "awaiting_approval"), ("awaiting_approval", "retry_ready")]


def test_permit_retry_of_a_four_eyes_step_under_review_sends_it_back_to_its_reviewers(
    four_eyes_tool: None, rita: Client, agent: Any, awaiting: Step, second_reviewer: Any
) -> None:
    # Issue 23 on the dashboard: one approval of two, a malformed envelope, the Permit retry button.
    decide(rita, awaiting, "approve", "ok by me")
    malformed = approval_envelope(operation_ref=awaiting.operation_ref, category="not_a_category")
    assert agent.envelope(malformed).status_code == 422
    awaiting.refresh_from_db()
    assert (awaiting.state, awaiting.reason) == ("escalated", "malformed_envelope")

    response = decide(rita, awaiting, "permit_retry", "looks transient")
    assert response.status_code == 303
    awaiting.refresh_from_db()
    assert (awaiting.state, awaiting.reason) == ("awaiting_approval", "approval_pending")
    # Rita's approval still counts, so the page offers her no second one; Sam's releases it.
    sam = logged_in(second_reviewer)
    assert 'value="approve"' not in rita.get(f"/steps/{awaiting.pk}/").content.decode()
    assert 'value="approve"' in sam.get(f"/steps/{awaiting.pk}/").content.decode()
    again = decide(rita, awaiting, "approve", "really ok", **HTMX)
    assert "You already approved this input" in again.content.decode()
    decide(sam, awaiting, "approve", "second pair of eyes")
    awaiting.refresh_from_db()
    assert (awaiting.state, awaiting.reason) == ("retry_ready", "approved")


def test_a_forged_post_by_a_viewer_is_403_and_changes_nothing(viewer: Any, awaiting: Step) -> None:
    response = decide(logged_in(viewer), awaiting, "approve", "I am only a viewer")

    assert response.status_code == 403
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"
    assert not Decision.objects.exists()


def test_another_teams_reviewer_gets_404_and_changes_nothing(outsider: Any, awaiting: Step) -> None:
    client = logged_in(outsider)

    assert decide(client, awaiting, "reject", "mine now").status_code == 404
    assert decide(client, awaiting, "reject", "mine now", **HTMX).status_code == 404
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"


def test_anonymous_posts_go_to_login(client: Client, awaiting: Step) -> None:
    response = decide(client, awaiting, "approve")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"


def test_a_post_without_the_csrf_token_is_refused(reviewer: Any, awaiting: Step) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)

    response = decide(client, awaiting, "approve")

    assert response.status_code == 403
    awaiting.refresh_from_db()
    assert awaiting.state == "awaiting_approval"


def test_the_csrf_token_in_hx_headers_is_accepted(reviewer: Any, awaiting: Step) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    page = client.get(f"/steps/{awaiting.pk}/").content.decode()
    token = page.split('hx-headers=\'{"X-CSRFToken": "')[1].split('"')[0]

    response = decide(client, awaiting, "approve", "fine", HTTP_X_CSRFTOKEN=token, **HTMX)

    assert response.status_code == 200
    awaiting.refresh_from_db()
    assert awaiting.state == "retry_ready"


def test_get_is_not_allowed(rita: Client, awaiting: Step) -> None:
    assert rita.get(f"/steps/{awaiting.pk}/decide").status_code == 405
