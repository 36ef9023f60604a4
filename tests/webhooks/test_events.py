"""Each event type of contract §5 reaches the endpoint with its body shape, signed."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from holdpoint_sdk import verify_webhook
from standardwebhooks.webhooks import Webhook

from accounts.models import Team
from approvals.services import step_decide
from envelopes.models import Step, Tool
from envelopes.services import tool_resume
from tests.conftest import error_envelope
from webhooks.delivery import deliver_due_messages
from webhooks.models import OutboxMessage, WebhookEndpoint

from .conftest import Receiver

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")

STEP_KEYS = {
    "operation_ref",
    "tool",
    "state",
    "held",
    "reason",
    "correlation_id",
    "run_id",
    "attempts",
    "max_attempts",
    "not_before",
    "deadline",
    "directive",
    "last_envelope",
    "decisions",
    "created_at",
    "updated_at",
    "url",
}


def delivered_events(receiver: Receiver, endpoint: WebhookEndpoint) -> list[dict[str, Any]]:
    deliver_due_messages()
    events = []
    for request in receiver.received:
        checked = Webhook(endpoint.secret).verify(request.body, request.headers)
        assert verify_webhook(request.body, request.headers, endpoint.secret) == checked
        assert set(checked) == {"type", "timestamp", "data"}
        assert checked["timestamp"].endswith("Z")
        events.append(checked)
    assert not OutboxMessage.objects.exclude(status="delivered").exists()
    return events


def of_type(events: list[dict[str, Any]], event_type: str) -> list[dict[str, Any]]:
    return [event["data"] for event in events if event["type"] == event_type]


def test_a_transition_sends_step_state_changed_with_the_step_and_its_cause(
    agent,
    endpoint: WebhookEndpoint,
    receiver: Receiver,  # type: ignore[no-untyped-def]
) -> None:
    assert agent.envelope(error_envelope()).status_code == 201
    [data] = of_type(delivered_events(receiver, endpoint), "step.state_changed")
    assert data["cause"] == "envelope"
    step = data["step"]
    assert set(step) >= STEP_KEYS
    assert (step["operation_ref"], step["tool"], step["state"]) == (
        "run_81/step_4",
        "send_email",
        "needs_input",
    )
    assert step["directive"]["action"] == "fix_input"
    assert step["last_envelope"]["code"] == "INVALID_RECIPIENT_ADDRESS"
    message = OutboxMessage.objects.get()
    assert message.step is not None and message.step.operation_ref == "run_81/step_4"


def test_a_decision_sends_step_decided_with_the_decision(
    agent,
    team: Team,
    make_reviewer,
    endpoint: WebhookEndpoint,
    receiver: Receiver,  # type: ignore[no-untyped-def]
) -> None:
    body = error_envelope(
        code="REFUND_ABOVE_LIMIT",
        category="authorization",
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="request_approval",
        safe_details={},
    )
    assert agent.envelope(body).status_code == 201
    step = Step.objects.get()
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve")
    events = delivered_events(receiver, endpoint)
    [decided] = of_type(events, "step.decided")
    assert decided["step"]["state"] == "retry_ready"
    decision = decided["decision"]
    # §5's fields, (v1.2, §11) who decided: a reviewer, or a rule or grant, and (§12) for whom.
    assert set(decision) == {
        "action",
        "reviewer",
        "reason",
        "decided_at",
        "input_fingerprint",
        "edited",
        "decided_by",
        "on_behalf_of",
        "receipt",
    }
    assert decision["on_behalf_of"] is None  # rita decided as herself
    assert len(decision["receipt"].split(".")) == 3  # §13: a compact JWS (its claims: tests/evidence)
    assert (decision["action"], decision["reviewer"]) == ("approve", "rita")
    assert decision["decided_by"] == {"kind": "reviewer", "reviewer": "rita", "rule": None, "grant": None}
    assert decided["step"]["policy"] is None
    assert (decision["input_fingerprint"], decision["edited"]) == (None, False)  # no attempt: nothing bound
    causes = [data["cause"] for data in of_type(events, "step.state_changed")]
    assert causes == ["envelope", "decision"]


def test_an_edited_approval_sends_its_fingerprint_and_the_input_in_the_directive(
    agent,
    team: Team,
    make_reviewer,
    endpoint: WebhookEndpoint,
    receiver: Receiver,  # type: ignore[no-untyped-def]
) -> None:
    from envelopes.proposal import input_fingerprint

    asked = {"amount": 9000, "customer": "c_1", "api_key": "sk-live-4eC39HqLyjWDarjtT1zdp7dc"}
    edited = {"amount": 500, "customer": "c_1"}
    ref = "run_81/step_4"
    assert agent.attempt(ref, tool="send_email", fingerprint=input_fingerprint(asked), input=asked).status_code == 201
    body = error_envelope(
        code="REFUND_ABOVE_LIMIT",
        category="authorization",
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="request_approval",
        safe_details={},
    )
    assert agent.envelope(body).status_code == 201
    step = Step.objects.get()
    # The proposal was redacted (its api_key): a plain approval binds what the agent asked.
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve")
    # The agent asks with another input: refused, back to a reviewer with that input as proposal.
    plain = {"amount": 9000, "customer": "c_1"}
    refused = agent.attempt(ref, tool="send_email", fingerprint=input_fingerprint(plain), input=plain)
    assert (refused.status_code, refused.json()["code"]) == (409, "approval_mismatch")
    assert refused.json()["step"]["proposal"]["input"] == plain
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("sam"), action="approve", edited_input=edited)
    events = delivered_events(receiver, endpoint)
    decided = of_type(events, "step.decided")[-1]
    assert decided["decision"]["input_fingerprint"] == input_fingerprint(edited)
    assert decided["decision"]["edited"] is True
    assert decided["step"]["directive"]["input"] == edited
    assert decided["step"]["directive"]["input_fingerprint"] == input_fingerprint(edited)
    assert decided["step"]["proposal"]["input"] == plain
    assert "sk-live" not in json.dumps(events)


def test_a_service_wide_failure_sends_tool_halted_and_a_resume_sends_tool_resumed(
    agent,
    team: Team,
    endpoint: WebhookEndpoint,
    receiver: Receiver,  # type: ignore[no-untyped-def]
) -> None:
    not_before = (timezone.now() + timedelta(minutes=10)).replace(microsecond=0)
    body = error_envelope(
        code="PROVIDER_DOWN",
        category="dependency",
        retry={
            "directive": "after_delay",
            "not_before": not_before.isoformat().replace("+00:00", "Z"),
            "max_attempts_remaining": 2,
        },
        next_action="wait_and_retry",
        scope="service",
        safe_details={},
    )
    assert agent.envelope(body).status_code == 201
    tool_resume(
        tool=Tool.objects.get(team=team, name="send_email"),
        actor="rita",
        reviewer="rita",
        reason="resumed_by_reviewer",
    )
    events = delivered_events(receiver, endpoint)
    [halted] = of_type(events, "tool.halted")
    assert halted == {
        "tool": "send_email",
        "reason": "PROVIDER_DOWN",
        "until": not_before.isoformat().replace("+00:00", "Z"),
        "reviewer": None,
    }
    [resumed] = of_type(events, "tool.resumed")
    assert resumed == {
        "tool": "send_email",
        "reason": "resumed_by_reviewer",
        "until": None,
        "reviewer": "rita",
    }


def test_another_teams_endpoint_hears_nothing(
    agent,
    other_team: Team,
    receiver: Receiver,
    allow_private: None,  # type: ignore[no-untyped-def]
) -> None:
    from webhooks.services import endpoint_create

    endpoint_create(team=other_team, url=receiver.url())
    assert agent.envelope(error_envelope()).status_code == 201
    deliver_due_messages()
    assert receiver.received == []
