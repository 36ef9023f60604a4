"""The test against history (rules/history.py and POST …/rules/test): the draft set over the
team's recent proposals, beside the current set, with bounded work."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from accounts.models import Team
from rules import history
from tests.conftest import AgentClient
from tests.rules.conftest import BIG_REFUNDS, RulesClient, attempt

pytestmark = pytest.mark.django_db


def test_a_draft_is_tested_against_the_last_30_days(admin_api: RulesClient, refund_history: list[str]) -> None:
    response = admin_api.test({"rules": [BIG_REFUNDS]})

    assert response.status_code == 200, response.content
    report = response.json()
    assert report["attempts"] == 6 and report["capped"] is False and report["tools"] == ["issue_refund"]
    assert report["draft"]["outcomes"] == {"denied": 0, "held": 3, "allowed": 0, "granted": 3}
    assert report["current"]["outcomes"] == {"denied": 0, "held": 0, "allowed": 0, "granted": 6}
    (change,) = report["changes"]
    assert change["from"] == "granted" and change["to"] == "held" and change["count"] == 3
    held = {example["operation_ref"] for example in change["examples"]}
    assert held == {"run_1/refund_1", "run_1/refund_3", "run_1/refund_4"}
    assert {example["rule"] for example in change["examples"]} == {"big-refunds"}


def test_a_shadow_rule_counts_would_be_holds_and_changes_nothing(
    admin_api: RulesClient, refund_history: list[str]
) -> None:
    report = admin_api.test({"rules": [{**BIG_REFUNDS, "mode": "shadow"}]}).json()
    assert report["draft"]["outcomes"]["granted"] == 6
    assert report["draft"]["shadow"]["would_hold"] == 3
    assert report["draft"]["by_rule"]["big-refunds"] == {"would_match": 3}
    assert report["changes"] == []


def test_a_rule_that_fails_on_a_call_fails_closed_and_counts_the_error(
    admin_api: RulesClient, refund_history: list[str]
) -> None:
    # `input.region` is missing on every refund: a deny fails closed.
    report = admin_api.test(
        {"rules": [{**BIG_REFUNDS, "name": "eu", "effect": "deny", "when": 'input.region == "eu"'}]}
    ).json()
    assert report["draft"]["outcomes"]["denied"] == 6
    assert report["draft"]["errors"] == 6


def test_the_test_compares_with_the_current_set(admin_api: RulesClient, refund_history: list[str]) -> None:
    admin_api.replace([BIG_REFUNDS])
    report = admin_api.test({"rules": [{**BIG_REFUNDS, "when": "input.amount_cents > 80000"}]}).json()
    assert report["current"]["outcomes"]["held"] == 3
    assert report["draft"]["outcomes"]["held"] == 1
    (change,) = report["changes"]
    assert (change["from"], change["to"], change["count"]) == ("held", "granted", 2)


def test_a_draft_that_does_not_compile_is_422_and_nothing_is_evaluated(admin_api: RulesClient) -> None:
    response = admin_api.test({"rules": [{**BIG_REFUNDS, "when": "input.amount_cents >"}]})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "rules[0].when"


def test_a_viewer_may_test(viewer_api: RulesClient, refund_history: list[str]) -> None:
    assert viewer_api.test({"rules": [BIG_REFUNDS]}).status_code == 200


def test_older_proposals_and_other_tools_are_left_out(
    agent: AgentClient, team: Team, refund_history: list[str]
) -> None:
    with time_machine.travel(timezone.now() - timedelta(days=31)):
        attempt(agent, "run_0/refund_old", "issue_refund", {"amount_cents": 99999})
    attempt(agent, "run_1/mail", "send_email", {"amount_cents": 99999})
    report = history.history_test(team=team, draft=[BIG_REFUNDS], current=[])
    assert report.attempts == 6


def test_examples_stop_at_20_and_the_work_stops_at_the_cap(
    agent: AgentClient, team: Team, monkeypatch: pytest.MonkeyPatch, django_assert_max_num_queries
) -> None:  # type: ignore[no-untyped-def]
    for number in range(30):
        attempt(agent, f"run_2/refund_{number}", "issue_refund", {"amount_cents": 60000 + number})
    report = history.history_test(team=team, draft=[BIG_REFUNDS], current=[])
    assert report.attempts == 30
    (change,) = report.as_json()["changes"]
    assert change["count"] == 30 and len(change["examples"]) == 20

    monkeypatch.setattr(history, "ATTEMPTS_CAP", 10)
    with django_assert_max_num_queries(2):
        found = history.proposals(
            team, ["issue_refund"], since=timezone.now() - history.WINDOW, cap=history.ATTEMPTS_CAP
        )
    assert len(found) == 10
    capped = history.history_test(team=team, draft=[BIG_REFUNDS], current=[])
    assert capped.attempts == 10 and capped.capped is True
    # The newest first: the cap keeps the latest proposals.
    assert {a.step.operation_ref for a in found} == {f"run_2/refund_{n}" for n in range(20, 30)}


def test_a_star_rule_reads_every_tool(agent: AgentClient, team: Team) -> None:
    attempt(agent, "run_3/a", "issue_refund", {"amount_cents": 1})
    attempt(agent, "run_3/b", "send_email", {"to": "x@example.com"})
    report = history.history_test(team=team, draft=[{**BIG_REFUNDS, "tools": ["*"], "when": "true"}], current=[])
    assert report.attempts == 2 and report.tools is None
    assert report.draft.outcomes["held"] == 2
