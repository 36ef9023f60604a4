"""An approval binds the input it approved until a granted attempt uses it (contract §3 v1.1).

Over HTTP: approve input A, let the agent move the step every way it can before running
anything (correct_input, wait_and_retry, the compact dialect's retryable error, an unknown
outcome then a not_found lookup, an escalation a reviewer permits), and ask the gate with
input B: it is refused `approval_mismatch` and the step waits for a reviewer again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from approvals.services import step_decide
from envelopes import services
from envelopes.models import Step
from tests.conftest import error_envelope, fingerprint, unknown_outcome

pytestmark = pytest.mark.django_db

FP_A = fingerprint('{"amount":120,"customer":"c_1"}')
FP_B = fingerprint('{"amount":9000,"customer":"c_1"}')
REF = "run_7/refund_1"
TOOL = "issue_refund"
COMPACT = 'application/json; profile="compact"'


def refused(response, code: str) -> dict[str, Any]:
    assert response.status_code == 409, response.content
    problem = response.json()
    assert problem["code"] == code
    return problem


def approved_step(agent, team, reviewer) -> Step:
    """Attempt with A, the tool asks for approval, a reviewer approves: A is bound."""
    assert agent.attempt(REF, tool=TOOL, fingerprint=FP_A).status_code == 201
    answer = agent.envelope(
        error_envelope(
            tool=TOOL,
            operation_ref=REF,
            code="REFUND_ABOVE_LIMIT",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
            safe_details={"limit": 500},
        )
    )
    assert answer.json()["step"]["state"] == "awaiting_approval"
    step = Step.objects.get(operation_ref=REF)
    step_decide(team=team, step_id=step.pk, actor=reviewer, action="approve", reason="refund is fine")
    step.refresh_from_db()
    assert (step.state, step.reason, step.approval_fingerprint) == ("retry_ready", "approved", FP_A)
    return step


def retrying(next_action: str, **overrides: Any) -> dict[str, Any]:
    if next_action == "correct_input":
        return error_envelope(tool=TOOL, operation_ref=REF, **overrides)
    not_before = overrides.pop("not_before", datetime.now(UTC) - timedelta(seconds=1))
    return error_envelope(
        tool=TOOL,
        operation_ref=REF,
        code="RATE_LIMITED",
        category="rate_limit",
        retry={"directive": "after_delay", "not_before": not_before.isoformat(), "max_attempts_remaining": 2},
        next_action="wait_and_retry",
        safe_details={},
        **overrides,
    )


def assert_back_to_a_reviewer(agent, step: Step) -> None:
    problem = refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_B), "approval_mismatch")
    assert (problem["step"]["state"], problem["step"]["reason"]) == ("awaiting_approval", "approval_mismatch")
    assert problem["directive"]["action"] == "hold"
    refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_B), "approval_pending")
    step.refresh_from_db()
    assert step.attempt_set.count() == 1  # only the attempt that asked for the approval ran


def test_correct_input_does_not_shed_the_approval(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    assert agent.envelope(retrying("correct_input")).json()["step"]["state"] == "needs_input"
    assert_back_to_a_reviewer(agent, step)


def test_correct_input_leaves_the_approved_input_an_identical_retry(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    agent.envelope(retrying("correct_input"))
    refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_A), "identical_retry")
    step.refresh_from_db()
    assert (step.state, step.approval_fingerprint) == ("needs_input", FP_A)


def test_wait_and_retry_past_not_before_does_not_shed_the_approval(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    assert agent.envelope(retrying("wait_and_retry")).json()["step"]["state"] == "waiting_retry"
    assert_back_to_a_reviewer(agent, step)


def test_wait_and_retry_then_the_timer_does_not_shed_the_approval(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    not_before = datetime.now(UTC) + timedelta(seconds=30)
    agent.envelope(retrying("wait_and_retry", not_before=not_before))
    with time_machine.travel(not_before + timedelta(seconds=1)):
        assert services.step_fire_timer(step_id=step.pk)
        step.refresh_from_db()
        assert (step.state, step.reason) == ("retry_ready", "retry_window_open")
        assert_back_to_a_reviewer(agent, step)


def test_a_compact_retryable_error_does_not_shed_the_approval(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    compact = {
        "code": "RATE_LIMITED",
        "category": "rate_limit",
        "retryable": True,
        "retry_after_ms": 0,
        "scope": "request",
        "correlation_id": "c-1",
        "tool": TOOL,
        "operation_ref": REF,
    }
    answer = agent.envelope(compact, content_type=COMPACT)
    assert answer.status_code == 201, answer.content
    assert answer.json()["step"]["state"] == "waiting_retry"
    assert_back_to_a_reviewer(agent, step)


def test_an_unknown_outcome_then_not_found_does_not_shed_the_approval(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    occurred = datetime.now(UTC) - timedelta(hours=1)  # the consistency window has passed
    agent.envelope(unknown_outcome(tool=TOOL, operation_ref=REF, occurred_at=occurred.isoformat()))
    answer = agent.verify(REF, "not_found").json()
    assert (answer["step"]["state"], answer["step"]["reason"]) == ("retry_ready", "verified_not_found")
    assert_back_to_a_reviewer(agent, step)


def test_a_retry_a_reviewer_permits_after_an_escalation_is_still_bound(agent, team, make_reviewer) -> None:
    reviewer = make_reviewer()
    step = approved_step(agent, team, reviewer)
    escalate = error_envelope(
        tool=TOOL,
        operation_ref=REF,
        code="NEEDS_A_HUMAN",
        category="internal",
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="escalate",
    )
    assert agent.envelope(escalate).json()["step"]["state"] == "escalated"
    step_decide(team=team, step_id=step.pk, actor=reviewer, action="permit_retry", reason="try again")
    assert_back_to_a_reviewer(agent, step)


def test_the_approved_input_runs_and_uses_the_approval_up(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    agent.envelope(retrying("wait_and_retry"))
    granted = agent.attempt(REF, tool=TOOL, fingerprint=FP_A)
    assert granted.status_code == 201
    step.refresh_from_db()
    assert step.approval_fingerprint == ""
    # Used up: the next failure is the agent's to fix, with any input.
    agent.envelope(retrying("correct_input"))
    assert agent.attempt(REF, tool=TOOL, fingerprint=FP_B).status_code == 201


def test_a_new_approval_after_a_mismatch_binds_the_input_that_asked(agent, team, make_reviewer) -> None:
    step = approved_step(agent, team, make_reviewer())
    agent.envelope(retrying("correct_input"))
    refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_B), "approval_mismatch")
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rob"), action="approve", reason="B is fine too")
    refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_A), "approval_mismatch")
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("sam"), action="approve", reason="A again")
    assert agent.attempt(REF, tool=TOOL, fingerprint=FP_A).status_code == 201
