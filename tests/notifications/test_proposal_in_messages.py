"""A held step's message shows a short form of what the agent proposes to run (contract §9),
as stored: redacted, so a secret in the input never reaches a channel."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Team
from envelopes.proposal import input_fingerprint
from notifications.services import channel_create
from notifications.tasks import notify
from tests.conftest import AgentClient
from tests.notifications.conftest import Inbox, SlackReceiver, hold

pytestmark = pytest.mark.usefixtures("allow_private", "no_enqueue")

SECRET = "sk_live_51HqLyjWDarjtT1zdp7dcXYZabc"
REFUND = {"amount": 1250, "customer": "cus_9", "note": f"use key {SECRET}", "api_token": "tok_plain_value_1"}


def propose_and_hold(agent: AgentClient, ref: str) -> None:
    answer = agent.attempt(ref, tool="charge_card", fingerprint=input_fingerprint(REFUND), input=REFUND)
    assert answer.status_code == 201, answer.content
    hold(agent, ref)


def test_slack_shows_the_proposed_input_redacted(team: Team, agent: AgentClient, slack: SlackReceiver) -> None:
    channel_create(team=team, kind="slack", target=slack.url("/services/T0/B0/x"))
    propose_and_hold(agent, "run_9/refund")
    notify()

    slack.check()
    [body] = [request.body.decode() for request in slack.received]
    assert "cus_9" in body and "1250" in body
    assert SECRET not in body and "tok_plain_value_1" not in body
    assert "[REDACTED" in body


def test_an_email_shows_the_proposed_input_redacted_in_text_and_html(
    team: Team, agent: AgentClient, smtp: Inbox, make_reviewer: Any
) -> None:
    rita = make_reviewer("rita", "reviewer")
    rita.email = "rita@example.com"
    rita.save()
    channel_create(team=team, kind="email", target="@reviewers")
    propose_and_hold(agent, "run_9/refund")
    notify()

    [mail] = smtp.messages
    text = mail.get_body(preferencelist=("plain",)).get_content()
    html = mail.get_body(preferencelist=("html",)).get_content()
    for part in (text, html):
        assert "cus_9" in part and "1250" in part
        assert SECRET not in part and "tok_plain_value_1" not in part
