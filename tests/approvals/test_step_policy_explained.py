"""A step a rule or grant acted on says which, on its page (contract §11,
"explained everywhere"): the rule's name, version and `when`, the grant's id, maker, expiry and
uses left."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from approvals.explain import policy_explained
from envelopes.models import Step
from tests.approvals.conftest import held_with_input
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

HELD_BY_RULE = {  # Step.policy as the gate stores it (envelopes.policy_acts.policy_of)
    "effect": "require_approval",
    "kind": "rule",
    "name": "big-refunds",
    "version": 2,
    "when": "input.amount_cents > 50000",
    "evaluated_at": "2026-12-02T07:00:00Z",
}


def test_the_step_page_says_which_rule_held_the_step(rita: Client, agent: AgentClient) -> None:
    step = held_with_input(agent, "r/1", {"amount_cents": 80000})
    Step.objects.filter(pk=step.pk).update(policy=HELD_BY_RULE, reason="approval_required_by_rule")

    html = rita.get(f"/steps/{step.pk}/").content.decode()
    assert 'id="step-policy"' in html
    assert "Held for approval by rule big-refunds (version 2): when input.amount_cents &gt; 50000" in html


def test_a_step_no_rule_acted_on_says_nothing_of_rules(rita: Client, agent: AgentClient) -> None:
    step = held_with_input(agent, "r/2", {"amount_cents": 80000})
    assert 'id="step-policy"' not in rita.get(f"/steps/{step.pk}/").content.decode()


@pytest.mark.parametrize(
    ("policy", "reason", "said"),
    [
        (
            {"kind": "rule", "name": "r", "version": 3, "when": "true", "effect": "deny"},
            "denied_by_rule",
            "Refused by rule r (version 3): when true",
        ),
        (
            {"effect": "allow", "rule": None, "grant": {"id": 9, "created_by": "rita", "uses_left": 4,
                                                        "expires_at": "2026-12-02T10:00:00Z", "when": "true"}},
            "approved_by_grant",
            "Approved by grant 9, made by rita, expires 2026-12-02 10:00 UTC, 4 uses left: when true",
        ),
        (None, "approved", None),
    ],
)  # fmt: skip
def test_the_sentence_reads_the_stored_policy_and_the_api_shape_alike(
    policy: dict[str, Any] | None, reason: str, said: str | None
) -> None:
    assert policy_explained(policy, reason=reason) == said
