"""Messages say which rule held a step (contract §11 "explained everywhere"), and a Slack
message for a step where a grant can be made links the step page's "Approve and allow similar"
form, as received by a local Slack and mail outbox."""

from __future__ import annotations

import json

import pytest

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import Step
from envelopes.proposal import input_fingerprint
from notifications.services import channel_create
from notifications.tasks import notify
from policy.services import rules_replace
from tests.conftest import AgentClient
from tests.notifications.conftest import Inbox, SlackReceiver, hold_proposing

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")

RULE = {
    "name": "refunds-over-500",
    "tools": ["refund"],
    "when": "input.amount_cents > 50000",
    "effect": "require_approval",
}
REFUND = {"customer": "cus_42", "amount_cents": 80000}


def held_by_rule(team: Team, agent: AgentClient) -> Step:
    rules_replace(team=team, rules=[RULE], actor="ada", if_version=None)
    answer = agent.attempt("run_2/refund", tool="refund", fingerprint=input_fingerprint(REFUND), input=REFUND)
    assert answer.status_code == 409 and answer.json()["code"] == "approval_required", answer.content
    return Step.objects.get(operation_ref="run_2/refund")


def test_email_names_the_rule_that_held_the_step(team: Team, agent: AgentClient, smtp: Inbox) -> None:
    channel_create(team=team, kind="email", target="ops@example.com")
    held_by_rule(team, agent)
    notify()

    [mail] = smtp.messages
    text = mail.get_body(preferencelist=("plain",)).get_content()
    html = mail.get_body(preferencelist=("html",)).get_content()
    said = "Held for approval by rule refunds-over-500 (version 1): when input.amount_cents > 50000"
    assert f"policy: {said}" in text
    assert "refunds-over-500 (version 1)" in html


def test_slack_names_the_rule(team: Team, agent: AgentClient, slack: SlackReceiver) -> None:
    channel_create(team=team, kind="slack", target=slack.url("/services/T0/B0/x"))
    held_by_rule(team, agent)
    notify()

    slack.check()
    [body] = [json.loads(request.body) for request in slack.received]
    text = json.dumps(body)
    assert "policy: Held for approval by rule refunds-over-500 (version 1)" in text


def test_a_step_no_rule_held_has_no_policy_line(
    team: Team, agent: AgentClient, slack: SlackReceiver
) -> None:
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")
    channel_create(team=team, kind="slack", target=slack.url("/services/T0/B0/x"))
    hold_proposing(agent, "run_3/charge")
    notify()

    slack.check()
    [request] = slack.received
    assert "policy:" not in request.body.decode()


def test_the_webhook_channel_carries_the_rule_in_words(team: Team, agent: AgentClient, receiver) -> None:  # type: ignore[no-untyped-def]
    channel_create(team=team, kind="webhook", target=receiver.url("/hook"))
    held_by_rule(team, agent)
    notify()

    [request] = receiver.received
    [step] = json.loads(request.body)["data"]["steps"]
    assert step["policy"].startswith("Held for approval by rule refunds-over-500 (version 1)")
