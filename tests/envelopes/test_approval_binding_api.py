"""An approval binds the input it approved until a granted attempt uses it (contract §3 v1.1),
an input under review is never released without its approvals, and an unused approval lapses
(v1.2).

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
from envelopes import services, tasks
from envelopes.configuration import tool_configure
from envelopes.models import AuditEvent, DomainEvent, Step
from tests.conftest import error_envelope, fingerprint, unknown_outcome
from tests.reviewers.conftest import token_for

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


# --- under review is not approved (contract §3 v1.2, issue 23) --------------------------------


def ask_for_approval(agent) -> None:
    """The agent's envelope for the step under test: it needs a reviewer's approval."""
    agent.envelope(
        error_envelope(
            tool=TOOL,
            operation_ref=REF,
            code="REFUND_ABOVE_LIMIT",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        )
    )


def four_eyes_step(agent, team) -> Step:
    """A tool with required_approvals 2; the agent's attempt with A asks for approval."""
    tool_configure(team=team, name=TOOL, settings={"required_approvals": 2}, actor="test")
    assert agent.attempt(REF, tool=TOOL, fingerprint=FP_A).status_code == 201
    ask_for_approval(agent)
    return Step.objects.get(operation_ref=REF)


def decide(reviewer_api, body: dict[str, Any]):  # type: ignore[no-untyped-def]
    return reviewer_api.decide(REF, body, etag=reviewer_api.etag(REF))


def test_one_reviewer_cannot_release_a_four_eyes_step_through_an_escalation(agent, team, make_reviewer) -> None:
    step = four_eyes_step(agent, team)
    alice, bob = token_for(make_reviewer("alice")), token_for(make_reviewer("bob"))
    assert decide(alice, {"action": "approve", "reason": "refund checked"}).status_code == 201  # 1 of 2

    # The agent posts a body that breaks the schema for the held step: escalated, binding kept.
    malformed = agent.envelope(error_envelope(tool=TOOL, operation_ref=REF, category="not_a_category"))
    assert malformed.status_code == 422
    step.refresh_from_db()
    assert (step.state, step.reason, step.approval_fingerprint) == ("escalated", "malformed_envelope", FP_A)
    assert step.approved_at is None

    # Alice presses Permit retry: the input is only under review, so it goes back to its reviewers.
    permitted = decide(alice, {"action": "permit_retry", "reason": "looks transient"})
    assert permitted.status_code == 201, permitted.content
    assert (permitted.json()["step"]["state"], permitted.json()["step"]["reason"]) == (
        "awaiting_approval",
        "approval_pending",
    )
    problem = refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_A), "approval_pending")
    assert (problem["step"]["state"], problem["directive"]["action"]) == ("awaiting_approval", "hold")
    step.refresh_from_db()
    assert (step.state, step.attempt_set.count()) == ("awaiting_approval", 1)
    assert step.expires_at is not None and step.expires_at > step.state_entered_at  # a fresh expiry

    # Alice's approval still counts (same input, same review): she cannot be the second.
    assert decide(alice, {"action": "approve", "reason": "again"}).status_code == 409
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    # A second, distinct reviewer releases it, and the gate grants the approved input.
    released = decide(bob, {"action": "approve", "reason": "second pair of eyes"})
    assert released.status_code == 201, released.content
    assert (released.json()["step"]["state"], released.json()["step"]["reason"]) == ("retry_ready", "approved")
    assert agent.attempt(REF, tool=TOOL, fingerprint=FP_A).status_code == 201
    step.refresh_from_db()
    assert (step.attempts, step.approval_fingerprint, step.approved_at) == (2, "", None)


def test_mark_committed_still_closes_a_step_under_review(agent, team, make_reviewer) -> None:
    step = four_eyes_step(agent, team)
    alice = token_for(make_reviewer("alice"))
    decide(alice, {"action": "approve", "reason": "refund checked"})
    agent.envelope(error_envelope(tool=TOOL, operation_ref=REF, category="not_a_category"))
    assert decide(alice, {"action": "mark_committed", "reason": "it went through"}).status_code == 201
    step.refresh_from_db()
    assert (step.state, step.reason, step.approval_fingerprint, step.review_started_at) == (
        "succeeded",
        "resolved_committed",
        "",
        None,
    )
    refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_A), "already_committed")


def test_a_new_request_for_approval_starts_a_new_count(agent, team, make_reviewer) -> None:
    step = four_eyes_step(agent, team)
    alice, bob = make_reviewer("alice"), make_reviewer("bob")
    step_decide(team=team, step_id=step.pk, actor=alice, action="approve", reason="ok")
    step_decide(team=team, step_id=step.pk, actor=bob, action="approve", reason="ok")
    step.refresh_from_db()
    assert step.state == "retry_ready" and step.approved_at is not None
    # Before running it, the agent asks again: a new review, the two approvals release nothing.
    ask_for_approval(agent)
    step.refresh_from_db()
    assert (step.state, step.approved_at) == ("awaiting_approval", None)
    refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_A), "approval_pending")
    result = step_decide(team=team, step_id=step.pk, actor=alice, action="approve", reason="still ok")
    assert (result.approvals_so_far, result.step.state) == (1, "awaiting_approval")


def test_an_unused_approval_lapses_through_the_timer_sweep(agent, team, make_reviewer) -> None:
    tool_configure(team=team, name=TOOL, settings={"approval_ttl_s": 600}, actor="test")
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=1)
    with time_machine.travel(start, tick=False):
        step = approved_step(agent, team, make_reviewer())
        assert step.approved_at == start
        assert step.approval_lapses_at == step.due_at == start + timedelta(seconds=600)
        # The retry window and the lapse both pending: due_at is the sooner one.
        agent.envelope(retrying("wait_and_retry", not_before=start + timedelta(seconds=60)))
        step.refresh_from_db()
        assert (step.state, step.due_at) == ("waiting_retry", start + timedelta(seconds=60))
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        assert tasks.sweep_due_steps() == 1
        step.refresh_from_db()
        assert (step.state, step.reason, step.due_at) == ("retry_ready", "retry_window_open", step.approval_lapses_at)
        assert tasks.sweep_due_steps() == 0
    with time_machine.travel(start + timedelta(seconds=600), tick=False):
        assert tasks.sweep_due_steps() == 1
        assert tasks.sweep_due_steps() == 0  # fired once
    step.refresh_from_db()
    assert (step.state, step.reason, step.approval_fingerprint, step.due_at) == (
        "cancelled",
        "approval_expired",
        "",
        None,
    )
    lapse = AuditEvent.objects.get(step=step, kind="transition", reason="approval_expired")
    assert (lapse.before, lapse.actor, lapse.data["effects"], lapse.data["timer"]) == (
        "retry_ready",
        "system",
        ["approval_expired"],
        "approval_lapsed",
    )
    event = DomainEvent.objects.filter(step_id=step.pk, type="step.state_changed").order_by("-id").first()
    assert event is not None and event.data["step"]["reason"] == "approval_expired"
    refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_A), "step_closed")


def test_the_gate_refuses_an_approval_past_its_lapse_before_the_sweep(agent, team, make_reviewer) -> None:
    tool_configure(team=team, name=TOOL, settings={"approval_ttl_s": 600}, actor="test")
    step = approved_step(agent, team, make_reviewer())
    assert step.approval_lapses_at is not None
    with time_machine.travel(step.approval_lapses_at + timedelta(seconds=1), tick=False):
        refused(agent.attempt(REF, tool=TOOL, fingerprint=FP_A), "step_closed")
    step.refresh_from_db()
    assert (step.state, step.reason, step.attempts) == ("cancelled", "approval_expired", 1)
