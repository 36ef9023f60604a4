"""The step page's "Approve and allow similar" (contract §11) through the dashboard's form, as a
browser without JavaScript sends it: the `when` prefilled and read in words before anything is
saved, the limits, who may, and where it is not offered."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import Step
from policy.models import Grant
from tests.approvals.conftest import approval_envelope, held_with_input, post_envelope, propose
from tests.conftest import AgentClient, logged_in

pytestmark = pytest.mark.django_db

REFUND = {"customer": "cus_42", "amount_cents": 80000, "currency": "EUR"}
PREFILLED = 'input.amount_cents == 80000 && input.currency == "EUR" && input.customer == "cus_42"'


@pytest.fixture
def held(agent: AgentClient) -> Step:
    return held_with_input(agent, "run_5/refund_1", REFUND, run_id="run_5")


def form(step: Step, **fields: Any) -> dict[str, Any]:
    when = fields.pop("when", PREFILLED)
    return {
        "action": "approve",
        "expected_state": step.state,
        "expected_since": step.state_entered_at.isoformat(),
        "when": when,
        "shown_when": fields.pop("shown_when", when),
        "scope": "team",
        "expires_in_s": "3600",
        "max_uses": "20",
        "reason": "checked with billing",
        **fields,
    }


def test_the_form_starts_from_the_approved_input_and_says_it_in_words(rita: Client, held: Step) -> None:
    html = rita.get(f"/steps/{held.pk}/").content.decode()

    assert 'id="approve-similar"' in html
    assert "input.customer == &quot;cus_42&quot;" in html  # escaped agent text, in the textarea
    assert "the input&#x27;s customer is &quot;cus_42&quot;" in html  # the words, before saving
    assert 'name="shown_when"' in html


def test_approving_with_a_grant_releases_the_step_and_makes_the_grant(
    rita: Client, held: Step, agent: AgentClient
) -> None:
    response = rita.post(f"/steps/{held.pk}/approve-similar", form(held, when='input.customer == "cus_42"'))

    assert response.status_code == 303
    step = Step.objects.get(pk=held.pk)
    assert (step.state, step.reason) == ("retry_ready", "approved")
    grant = Grant.objects.get()
    assert (grant.tool, grant.when, grant.scope, grant.max_uses, grant.created_by, grant.from_step_id) == (
        "charge_card",
        'input.customer == "cus_42"',
        "team",
        20,
        "rita",
        held.pk,
    )
    assert 3590 <= (grant.expires_at - grant.created_at).total_seconds() <= 3600
    page = rita.get(f"/steps/{held.pk}/").content.decode()
    assert f"Grant {grant.pk} allows similar calls of charge_card" in page


def test_a_when_changed_since_its_words_were_shown_saves_nothing_and_shows_the_new_words(
    rita: Client, held: Step
) -> None:
    response = rita.post(
        f"/steps/{held.pk}/approve-similar", form(held, when='input.customer == "cus_9"', shown_when=PREFILLED)
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert "read it in words above, then approve again" in html
    assert "the input&#x27;s customer is &quot;cus_9&quot;" in html
    assert Step.objects.get(pk=held.pk).state == "awaiting_approval"
    assert not Grant.objects.exists()


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"when": "input.customer =="}, "does not compile"),
        ({"when": "input.amount_cents"}, "does not compile"),
        ({"max_uses": "1001"}, "less than or equal to 1000"),
        ({"max_uses": "0"}, "greater than or equal to 1"),
        ({"expires_in_s": str(8 * 24 * 3600)}, "Select a valid choice"),
        ({"scope": "everyone"}, "Select a valid choice"),
    ],
)
def test_a_grant_outside_the_limits_is_refused_and_nothing_is_approved(
    rita: Client, held: Step, fields: dict[str, str], said: str
) -> None:
    response = rita.post(f"/steps/{held.pk}/approve-similar", form(held, **fields))

    assert response.status_code == 422
    assert said in response.content.decode()
    assert Step.objects.get(pk=held.pk).state == "awaiting_approval"
    assert not Grant.objects.exists()


def test_it_is_not_offered_when_the_tool_needs_two_approvals(rita: Client, agent: AgentClient, team: Team) -> None:
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")
    step = held_with_input(agent, "run_5/refund_9", REFUND)

    assert 'id="approve-similar"' not in rita.get(f"/steps/{step.pk}/").content.decode()
    response = rita.post(f"/steps/{step.pk}/approve-similar", form(step))
    assert response.status_code == 303
    assert not Grant.objects.exists()
    assert not Step.objects.get(pk=step.pk).decisions.exists()


def test_it_is_not_offered_without_the_agents_input(rita: Client, agent: AgentClient) -> None:
    propose(agent, "run_5/refund_8", None)
    step = post_envelope(agent, approval_envelope(operation_ref="run_5/refund_8"))
    assert 'id="approve-similar"' not in rita.get(f"/steps/{step.pk}/").content.decode()


def test_a_viewer_is_refused_and_another_team_sees_nothing(
    held: Step, viewer: Any, outsider: Any, make_reviewer: Any
) -> None:
    assert 'id="approve-similar"' not in logged_in(viewer).get(f"/steps/{held.pk}/").content.decode()
    assert logged_in(viewer).post(f"/steps/{held.pk}/approve-similar", form(held)).status_code == 403
    assert logged_in(outsider).post(f"/steps/{held.pk}/approve-similar", form(held)).status_code == 404
    assert logged_in(outsider).post(f"/steps/{held.pk}/grant-words", {"when": "true"}).status_code == 404
    assert not Grant.objects.exists()


def test_the_words_follow_the_text_being_edited(rita: Client, held: Step) -> None:
    response = rita.post(
        f"/steps/{held.pk}/grant-words",
        {"when": 'input.customer == "cus_42" && input.amount_cents <= 100000'},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="grant-words",
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "the input&#x27;s amount_cents is at most" in html
    assert 'value="input.customer == &quot;cus_42&quot; &amp;&amp; input.amount_cents &lt;= 100000"' in html
    assert rita.get(f"/steps/{held.pk}/grant-words").status_code == 405


def test_a_stale_form_is_told_already_decided(rita: Client, held: Step, second_reviewer: Any) -> None:
    stale = form(held)
    assert logged_in(second_reviewer).post(f"/steps/{held.pk}/decide", {**stale, "action": "reject", "reason": "no"})
    response = rita.post(f"/steps/{held.pk}/approve-similar", stale, follow=True)
    assert "Already decided" in response.content.decode()
    assert not Grant.objects.exists()
