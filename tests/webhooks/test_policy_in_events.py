"""A webhook for a step a rule held says which rule, with its version and `when` (contract §11,
"explained everywhere"), signed as §5 says and checked with the standardwebhooks library."""

from __future__ import annotations

from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from accounts.models import Team
from envelopes.proposal import input_fingerprint
from policy.services import rules_replace
from tests.conftest import AgentClient
from webhooks.delivery import deliver_due_messages
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")

RULE = {"name": "big-refunds", "tools": ["refund"], "when": "input.amount_cents > 50000", "effect": "require_approval"}


def test_the_webhook_carries_the_rule_with_its_when(
    agent: AgentClient, team: Team, endpoint: WebhookEndpoint, receiver: Any
) -> None:
    rules_replace(team=team, rules=[RULE], actor="ada", if_version=None)
    value = {"amount_cents": 80000}
    assert agent.attempt("r/5", tool="refund", fingerprint=input_fingerprint(value), input=value).status_code == 409
    deliver_due_messages()

    bodies = [Webhook(endpoint.secret).verify(request.body, request.headers) for request in receiver.received]
    [held] = [body["data"]["step"] for body in bodies if body["type"] == "step.state_changed"]
    assert held["policy"]["rule"] == {"name": "big-refunds", "version": 1, "when": "input.amount_cents > 50000"}
    assert held["reason"] == "approval_required_by_rule"
