"""Approve with an edited input through the reviewer API (`input`, contract §7, §10): the same
checks and binding as the dashboard's "Edit and approve", because it is the same service."""

from __future__ import annotations

from typing import Any

import pytest

from envelopes.models import Decision, Step
from envelopes.proposal import input_fingerprint
from tests.conftest import AgentClient
from tests.envelopes.test_proposed_input_api import REF, REFUND, TOOL, ask_approval, attempt
from tests.reviewers.conftest import ReviewerClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def proposed(agent: AgentClient) -> Step:
    assert attempt(agent, REFUND).status_code == 201
    ask_approval(agent)
    return Step.objects.get(operation_ref=REF)


def test_an_edited_approval_binds_the_edit_and_the_agent_gets_it(
    rita_api: ReviewerClient, agent: AgentClient, proposed: Step
) -> None:
    edited = {**REFUND, "amount": 100}

    response = rita_api.decide(REF, {"action": "approve", "reason": "lower", "input": edited}, etag=rita_api.etag(REF))

    assert response.status_code == 201, response.content
    decision = response.json()["decision"]
    assert (decision["edited"], decision["input_fingerprint"]) == (True, input_fingerprint(edited))
    directive = agent.step(REF).json()["directive"]
    assert (directive["input"], directive["input_fingerprint"]) == (edited, input_fingerprint(edited))
    assert agent.attempt(REF, tool=TOOL, fingerprint=input_fingerprint(edited), input=edited).status_code == 201


def test_after_an_edited_approval_the_original_input_is_refused(
    rita_api: ReviewerClient, agent: AgentClient, proposed: Step
) -> None:
    edited = {**REFUND, "amount": 100}
    assert rita_api.decide(REF, {"action": "approve", "input": edited}, etag=rita_api.etag(REF)).status_code == 201

    refused = attempt(agent, REFUND)

    assert refused.status_code == 409
    assert refused.json()["code"] == "approval_mismatch"


def test_a_plain_approval_binds_the_proposal(rita_api: ReviewerClient, proposed: Step) -> None:
    response = rita_api.decide(REF, {"action": "approve"}, etag=rita_api.etag(REF))

    decision = response.json()["decision"]
    assert (decision["edited"], decision["input_fingerprint"]) == (False, input_fingerprint(REFUND))
    assert response.json()["step"]["proposal"]["input"] == REFUND


@pytest.mark.parametrize(
    ("edited", "rule"),
    [
        ({**REFUND, "note": "password=hunter2hunter2"}, "no_secret"),
        ({**REFUND, "api_key": "x"}, "no_secret"),
        ({"a": "x" * 40_000}, "max_bytes"),
    ],
)
def test_an_edit_the_service_refuses_is_422_naming_the_field_and_nothing_is_decided(
    rita_api: ReviewerClient, proposed: Step, edited: dict[str, Any], rule: str
) -> None:
    response = rita_api.decide(REF, {"action": "approve", "input": edited}, etag=rita_api.etag(REF))

    assert response.status_code == 422, response.content
    body = response.json()
    assert body["code"] == "input_refused"
    assert body["errors"][0]["field"].startswith("input")
    assert body["errors"][0]["rule"] == rule
    assert not Decision.objects.exists()
    proposed.refresh_from_db()
    assert proposed.state == "awaiting_approval"


def test_an_edit_of_a_step_without_a_proposal_is_refused(rita_api: ReviewerClient, awaiting: Step) -> None:
    ref = awaiting.operation_ref
    response = rita_api.decide(ref, {"action": "approve", "input": {"amount": 1}}, etag=rita_api.etag(ref))

    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "input", "rule": "not_editable"}]
    assert not Decision.objects.exists()
