"""`grant` in an approval's body (contract §11, "approve and allow similar" over the reviewer
API), with real reviewer tokens: the grant made with the approval, its `when` prefilled from the
approved input when the body has none, and each refusal naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import Step
from policy.models import Grant
from tests.approvals.conftest import held_with_input
from tests.conftest import AgentClient
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db

REF = "run_3/refund_1"
REFUND = {"customer": "cus_42", "amount_cents": 80000, "currency": "EUR"}


@pytest.fixture
def held(agent: AgentClient) -> Step:
    return held_with_input(agent, REF, REFUND, run_id="run_3")


def approve(api: ReviewerClient, grant: Any, **body: Any):  # type: ignore[no-untyped-def]
    return api.decide(REF, {"action": "approve", "reason": "ok", "grant": grant, **body}, etag=api.etag(REF))


def test_an_approval_with_a_grant_makes_it_and_answers_it(rita_api: ReviewerClient, held: Step) -> None:
    response = approve(rita_api, {"scope": "run", "when": 'input.customer == "cus_42"', "max_uses": 2})

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["step"]["state"] == "retry_ready"
    grant = Grant.objects.get()
    assert body["grant"] == {
        "id": grant.pk,
        "tool": "charge_card",
        "when": 'input.customer == "cus_42"',
        "when_in_words": 'the input\'s customer is "cus_42"',
        "scope": "run",
        "created_by": "rita",
        "created_at": body["grant"]["created_at"],
        "expires_at": body["grant"]["expires_at"],
        "max_uses": 2,
        "uses": 0,
        "from_step": held.pk,
    }
    assert (grant.scope_value, (grant.expires_at - grant.created_at).total_seconds()) == ("run_3", 3600)


def test_without_when_the_grant_starts_from_the_approved_input(rita_api: ReviewerClient, held: Step) -> None:
    response = approve(rita_api, {"scope": "team"})

    assert response.status_code == 201, response.content
    grant = Grant.objects.get()
    assert grant.when == 'input.amount_cents == 80000 && input.currency == "EUR" && input.customer == "cus_42"'
    assert (grant.max_uses, grant.scope, grant.scope_value) == (20, "team", "")


def test_with_an_edited_input_the_grant_starts_from_the_edit(rita_api: ReviewerClient, held: Step) -> None:
    edited = {**REFUND, "amount_cents": 40000}
    response = approve(rita_api, {"scope": "team"}, input=edited)

    assert response.status_code == 201, response.content
    assert "input.amount_cents == 40000" in Grant.objects.get().when


@pytest.mark.parametrize(
    ("grant", "field", "rule"),
    [
        ({"scope": "run", "when": "input.customer =="}, "grant.when", "cel"),
        ({"scope": "run", "when": "input.amount_cents"}, "grant.when", "cel"),
        ({"scope": "run", "when": 5}, "grant.when", "type"),
        ({"scope": "everyone"}, "grant.scope", "invalid_choice"),
        ({}, "grant.scope", "required"),
        ({"scope": "run", "max_uses": 1001}, "grant.max_uses", "max_value"),
        ({"scope": "run", "max_uses": 0}, "grant.max_uses", "min_value"),
        ({"scope": "run", "expires_in_s": 7 * 24 * 3600 + 1}, "grant.expires_in_s", "max_value"),
        ({"scope": "run", "colour": "red"}, "grant.colour", "additionalProperties"),
        ("team", "grant", "invalid"),
    ],
)
def test_a_grant_that_breaks_a_rule_is_422_naming_its_field_and_nothing_is_decided(
    rita_api: ReviewerClient, held: Step, grant: Any, field: str, rule: str
) -> None:
    response = approve(rita_api, grant)

    assert response.status_code == 422, response.content
    assert {"field": field, "rule": rule} in [
        {"field": error["field"], "rule": error["rule"]} for error in response.json()["errors"]
    ]
    assert Step.objects.get(pk=held.pk).state == "awaiting_approval"
    assert not Grant.objects.exists()


def test_a_grant_goes_with_approve_only(rita_api: ReviewerClient, held: Step) -> None:
    response = rita_api.decide(
        REF, {"action": "reject", "reason": "no", "grant": {"scope": "run"}}, etag=rita_api.etag(REF)
    )
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "grant", "rule": "approve_only"}]
    assert not Grant.objects.exists()


def test_a_tool_needing_two_approvals_never_gets_a_grant(
    rita_api: ReviewerClient, agent: AgentClient, team: Team
) -> None:
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")
    held_with_input(agent, REF, REFUND, run_id="run_3")

    response = approve(rita_api, {"scope": "team"})

    assert response.status_code == 422, response.content
    assert response.json()["errors"] == [{"field": "grant", "rule": "four_eyes"}]
    assert not Grant.objects.exists()
    assert not Step.objects.get(operation_ref=REF).decisions.exists()


def test_a_viewer_cannot_and_an_agent_key_cannot(viewer: Any, held: Step, agent: AgentClient) -> None:
    assert approve(token_for(viewer), {"scope": "team"}).status_code == 403
    response = agent.post(f"/api/v1/teams/acme/steps/{REF.replace('/', '%2F')}/decisions", {"action": "approve"})
    assert response.status_code == 403
    assert not Grant.objects.exists()
