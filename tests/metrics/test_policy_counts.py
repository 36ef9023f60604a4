"""The metrics of what rules and grants did (contract §11): `policy` and `approvals.by` through
the metrics API with a real key and on the tool page and the overview, the same numbers live and
from the rollups."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import Team
from approvals.services import step_decide
from envelopes.models import Step
from envelopes.proposal import input_fingerprint
from metrics.services import metrics_rollup
from policy.services import rules_replace
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient, logged_in

pytestmark = pytest.mark.django_db

RULES = [
    {"name": "no-huge-refunds", "tools": ["refund"], "when": "input.amount_cents > 1000000", "effect": "deny"},
    {"name": "big-refunds", "tools": ["refund"], "when": "input.amount_cents > 50000", "effect": "require_approval"},
    {"name": "small-refunds", "tools": ["refund"], "when": "input.amount_cents <= 20000", "effect": "allow"},
    {
        "name": "dollars",
        "tools": ["refund"],
        "when": 'input.currency == "USD"',
        "effect": "require_approval",
        "mode": "shadow",
    },
]


def call(agent: AgentClient, ref: str, value: dict[str, Any]):  # type: ignore[no-untyped-def]
    return agent.attempt(ref, tool="refund", fingerprint=input_fingerprint(value), input=value)


@pytest.fixture
def history(agent: AgentClient, team: Team, make_reviewer: Any) -> Team:
    rules_replace(team=team, rules=RULES, actor="ada", if_version=None)
    rita = make_reviewer("rita", "reviewer")
    # A refund the deny refuses.
    assert call(agent, "r/1", {"customer": "c1", "amount_cents": 2000000, "currency": "EUR"}).status_code == 409
    # A big one held by the rule, approved by rita with a grant for the customer ...
    big = {"customer": "c2", "amount_cents": 80000, "currency": "USD"}
    assert call(agent, "r/2", big).json()["code"] == "approval_required"
    held = Step.objects.get(operation_ref="r/2")
    step_decide(
        team=team,
        step_id=held.pk,
        actor=rita,
        action="approve",
        grant={"when": 'input.customer == "c2"', "scope": "team", "expires_in_s": 3600, "max_uses": 5},
    )
    # ... which lets the customer's next big one through at the gate.
    assert call(agent, "r/3", {**big, "amount_cents": 70000}).status_code == 201
    # A small one the agent asks about: the allow rule approves it.
    assert call(agent, "r/4", {"customer": "c3", "amount_cents": 9000, "currency": "EUR"}).status_code == 201
    approved = post_envelope(agent, approval_envelope(operation_ref="r/4", tool="refund"))
    assert Step.objects.get(pk=approved.pk).reason == "approved_by_rule"
    return team


def test_the_api_counts_what_rules_and_grants_did_and_who_approved(history: Team, agent: AgentClient) -> None:
    answer = agent.get("/api/v1/tools/refund/metrics").json()

    assert answer["policy"] == {
        "denied_by_rule": 1,
        "held_by_rule": 1,
        "approved_by_rule": 1,
        "approved_by_grant": 1,
        "shadow_would_deny": 0,
        "shadow_would_hold": 1,  # the call in dollars the rule held (the grant's call stops at the grant)
        "shadow_would_allow": 0,
        "evaluation_errors": 0,
    }
    assert answer["approvals"]["by"] == {"reviewer": 1, "rule": 1, "grant": 1}


def test_the_rollups_give_the_same_numbers(history: Team, agent: AgentClient) -> None:
    now = timezone.now()
    since, until = now - timedelta(hours=3), now + timedelta(hours=2)
    window = {"since": since.isoformat(), "until": until.isoformat()}
    live = agent.get("/api/v1/tools/refund/metrics", window).json()
    metrics_rollup(now=until + timedelta(hours=1))
    assert agent.get("/api/v1/tools/refund/metrics", window).json() == live
    assert live["policy"]["held_by_rule"] == 1


def test_the_tool_page_and_the_overview_show_them(history: Team, make_reviewer: Any) -> None:
    client = logged_in(make_reviewer("vic", "viewer"))
    tool_page = client.get("/tools/refund/").content.decode()
    assert "1 reviewers" in tool_page and "1 rules · 1 grants" in tool_page
    assert "1 held" in tool_page  # shadow

    overview = client.get("/overview/").content.decode()
    assert "reviewer time saved: 1 by rules, 1 by grants" in overview
