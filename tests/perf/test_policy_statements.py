"""Issue 25 point 7: a team's rules and grants cost the attempt gate no statement of their own
(read with the step's context, compiled once per rule version per process): a grant with 50
enabled rules naming the tool and a live grant costs the plain grant's statements."""

from __future__ import annotations

import hashlib

import pytest
import rfc8785
from django.db import connection

from policy.services import grant_create, rules_replace
from tests.conftest import AgentClient
from tests.perf.rows import door
from tests.perf.test_attempt_statements import GRANT_MAX, REFUSAL_MAX

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the counts are PostgreSQL's")

INPUT = {"customer": "c_9", "amount_cents": 1200, "to": "a@example.com"}
INPUT_FP = hashlib.sha256(rfc8785.dumps(INPUT)).hexdigest()


def fifty_rules() -> list[dict[str, object]]:
    """A mix of effects and modes, none matching INPUT (the bench's attempt-rules set)."""
    effects = ["deny", "require_approval", "allow"]
    return [
        {
            "name": f"rule-{n}",
            "tools": ["send_email"] if n % 5 else ["*"],
            "when": f"has(input.amount_cents) && input.amount_cents > {100000 + n}",
            "effect": effects[n % 3],
            "mode": "shadow" if n % 7 == 0 else "enforce",
        }
        for n in range(50)
    ]


@pytest.fixture
def policy(team):  # type: ignore[no-untyped-def]
    rules_replace(team=team, rules=fifty_rules(), actor="admin", if_version=0)
    grant_create(
        team=team, tool="send_email", when='input.customer == "c_1"', scope="team", scope_value="", actor="rita"
    )


def test_a_grant_with_50_rules_costs_the_plain_grants_statements(  # type: ignore[no-untyped-def]
    agent: AgentClient, policy, django_assert_max_num_queries
) -> None:
    agent.attempt("warm-up", tool="send_email", fingerprint=INPUT_FP, input=INPUT)  # the rules' first read

    with django_assert_max_num_queries(GRANT_MAX + door()):
        answer = agent.attempt("rules-1", tool="send_email", fingerprint=INPUT_FP, input=INPUT)

    assert answer.status_code == 201, answer.content


def test_a_refusal_by_rule_costs_a_refusals_statements_and_its_tally(  # type: ignore[no-untyped-def]
    agent: AgentClient, team, django_assert_max_num_queries
) -> None:
    rules = [
        *fifty_rules(),
        {"name": "no-c9", "tools": ["send_email"], "when": 'input.customer == "c_9"', "effect": "deny"},
    ]
    rules_replace(team=team, rules=rules, actor="admin", if_version=0)
    agent.attempt("warm-up", tool="send_email", fingerprint=INPUT_FP, input=INPUT)

    with django_assert_max_num_queries(REFUSAL_MAX + 1 + door()):  # + the tally's upsert
        answer = agent.attempt("rules-2", tool="send_email", fingerprint=INPUT_FP, input=INPUT)

    assert answer.json()["code"] == "denied_by_rule"
