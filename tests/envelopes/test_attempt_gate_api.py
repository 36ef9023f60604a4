"""POST /steps/{ref}/attempts and /verification: the server decides whether a write may
happen again. The six rows of seed 000's contract-test table run end to end over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from envelopes.models import AuditEvent, Step
from tests.conftest import error_envelope, fingerprint, success_envelope, unknown_outcome

pytestmark = pytest.mark.django_db

FP1 = fingerprint("to=bob@exmaple")
FP2 = fingerprint("to=bob@example.com")
REF = "run_81/step_4"


def refused(response, code: str) -> dict:
    assert response.status_code == 409, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == code
    assert problem["directive"]["reason"] == code
    assert problem["step"]["operation_ref"]
    return problem


def test_the_first_attempt_creates_the_step_and_grants_attempt_1(agent) -> None:
    response = agent.attempt(REF, tool="send_email", fingerprint=FP1, run_id="run_81")
    assert response.status_code == 201
    body = response.json()
    assert body["attempt"] == 1
    assert body["directive"] == {
        "action": "proceed",
        "may_write": True,
        "not_before": None,
        "reason": "attempt_granted",
    }
    assert body["step"]["run_id"] == "run_81"


# --- seed 000, the contract-test table -------------------------------------------------------


def test_row1_invalid_address_refuses_an_unchanged_retry(agent) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=FP1)
    agent.envelope(error_envelope())
    refused(agent.attempt(REF, tool="send_email", fingerprint=FP1), "identical_retry")
    fixed = agent.attempt(REF, tool="send_email", fingerprint=FP2)
    assert fixed.status_code == 201
    assert fixed.json()["attempt"] == 2


def test_row2_rate_limit_runs_only_after_not_before(agent) -> None:
    now = datetime.now(UTC)
    not_before = now + timedelta(seconds=120)
    agent.attempt("read_1", tool="search_orders", fingerprint=FP1)
    body = error_envelope(
        tool="search_orders",
        operation_ref="read_1",
        code="RATE_LIMITED",
        category="rate_limit",
        retry={"directive": "after_delay", "not_before": not_before.isoformat(), "max_attempts_remaining": 2},
        next_action="wait_and_retry",
        safe_details={},
    )
    answer = agent.envelope(body).json()
    assert answer["directive"]["action"] == "wait"
    assert answer["directive"]["not_before"].startswith(not_before.strftime("%Y-%m-%dT%H:%M:%S"))
    early = agent.attempt("read_1", tool="search_orders", fingerprint=FP1)
    refused(early, "retry_not_before")
    assert 100 <= int(early["Retry-After"]) <= 121
    with time_machine.travel(not_before + timedelta(seconds=1)):
        assert agent.attempt("read_1", tool="search_orders", fingerprint=FP1).status_code == 201


def test_row3_write_timeout_allows_no_second_write_before_the_lookup(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    agent.envelope(unknown_outcome(tool="create_invoice"))
    refused(agent.attempt(REF, tool="create_invoice", fingerprint=FP1), "verification_required")
    refused(agent.attempt(REF, tool="create_invoice", fingerprint=FP2), "verification_required")
    assert AuditEvent.objects.filter(kind="refusal", reason="verification_required").count() == 2


def test_row4_a_duplicate_operation_key_found_committed_makes_the_step_a_success(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    agent.envelope(unknown_outcome(tool="create_invoice"))
    answer = agent.verify(REF, "committed", evidence_ref="inv_123").json()
    assert (answer["step"]["state"], answer["step"]["reason"]) == ("succeeded", "verified_committed")
    assert answer["directive"]["action"] == "stop"
    refused(agent.attempt(REF, tool="create_invoice", fingerprint=FP1), "already_committed")


def test_row5_lost_approval_never_invokes_the_tool_again(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    body = error_envelope(
        tool="create_invoice",
        code="MISSING_APPROVAL",
        category="authorization",
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="request_approval",
    )
    assert agent.envelope(body).json()["directive"]["action"] == "hold"
    refused(agent.attempt(REF, tool="create_invoice", fingerprint=FP1), "approval_pending")


def test_row6_a_repeated_outage_escalates_once_after_the_limit(agent) -> None:
    outage = dict(
        tool="call_vendor",
        code="UPSTREAM_UNAVAILABLE",
        category="dependency",
        next_action="wait_and_retry",
        safe_details={},
    )
    statuses = []
    for attempt in range(1, 4):
        grant = agent.attempt("vendor_1", tool="call_vendor", fingerprint=FP1)
        assert grant.status_code == 201, grant.content
        not_before = datetime.now(UTC) - timedelta(seconds=1)
        answer = agent.envelope(
            error_envelope(
                operation_ref="vendor_1",
                attempt=attempt,
                retry={
                    "directive": "after_delay",
                    "not_before": not_before.isoformat(),
                    "max_attempts_remaining": 3 - attempt,
                },
                **outage,
            )
        ).json()
        statuses.append((answer["step"]["state"], answer["step"]["reason"]))
    assert statuses[-1] == ("escalated", "attempt_budget_exhausted")
    assert statuses[:2] == [("waiting_retry", "retry_not_before")] * 2
    refused(agent.attempt("vendor_1", tool="call_vendor", fingerprint=FP1), "attempt_budget_exhausted")
    step = Step.objects.get(operation_ref="vendor_1")
    assert AuditEvent.objects.filter(step=step, reason="attempt_budget_exhausted", kind="transition").count() == 1


# --- the rest of the gate ------------------------------------------------------------------------


def test_a_crash_after_dispatch_makes_the_next_request_verify_the_same_ref(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    problem = refused(agent.attempt(REF, tool="create_invoice", fingerprint=FP1), "verification_required")
    assert (problem["step"]["state"], problem["step"]["reason"]) == ("verifying", "attempt_unreported")
    assert Step.objects.get().operation_ref == REF


def test_approval_is_bound_to_the_fingerprint_that_asked_for_it(agent, team, make_reviewer) -> None:
    from approvals.services import step_decide

    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    agent.envelope(
        error_envelope(
            tool="create_invoice",
            code="MISSING_APPROVAL",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        )
    )
    step = Step.objects.get()
    step_decide(team=team, step_id=step.pk, actor=make_reviewer(), action="approve", reason="ok")
    problem = refused(agent.attempt(REF, tool="create_invoice", fingerprint=FP2), "approval_mismatch")
    assert (problem["step"]["state"], problem["step"]["reason"]) == ("awaiting_approval", "approval_mismatch")
    # The input that went back to a reviewer is the one the new approval binds.
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rob"), action="approve", reason="ok again")
    refused(agent.attempt(REF, tool="create_invoice", fingerprint=FP1), "approval_mismatch")
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("sam"), action="approve", reason="FP1 after all")
    assert agent.attempt(REF, tool="create_invoice", fingerprint=FP1).status_code == 201


def test_a_service_wide_failure_halts_every_step_of_the_tool_until_resumed(agent, team) -> None:
    from envelopes.models import Tool
    from envelopes.services import tool_resume

    agent.attempt("b", tool="enrich_contact", fingerprint=FP1)
    agent.envelope(error_envelope(tool="enrich_contact", operation_ref="b"))  # needs_input
    agent.attempt("a", tool="enrich_contact", fingerprint=FP1)
    not_before = datetime.now(UTC) + timedelta(seconds=60)
    agent.envelope(
        error_envelope(
            tool="enrich_contact",
            operation_ref="a",
            code="RATE_LIMITED",
            category="rate_limit",
            scope="service",
            retry={"directive": "after_delay", "not_before": not_before.isoformat(), "max_attempts_remaining": 2},
            next_action="wait_and_retry",
            safe_details={},
        )
    )
    other_step = agent.attempt("b", tool="enrich_contact", fingerprint=FP2)
    refused(other_step, "tool_halted")
    assert 50 <= int(other_step["Retry-After"]) <= 61
    new_step = agent.attempt("c", tool="enrich_contact", fingerprint=FP2)
    assert new_step.json()["code"] == "tool_halted"
    assert new_step.json()["step"] is None
    assert not Step.objects.filter(operation_ref="c").exists()
    assert agent.attempt("x", tool="send_email", fingerprint=FP1).status_code == 201

    tool_resume(
        tool=Tool.objects.get(team=team, name="enrich_contact"), actor="rita", reviewer="rita", reason="vendor ok"
    )
    assert agent.attempt("b", tool="enrich_contact", fingerprint=FP2).status_code == 201


def test_a_halt_ends_by_itself_after_its_not_before(agent) -> None:
    not_before = datetime.now(UTC) + timedelta(seconds=60)
    agent.envelope(
        error_envelope(
            tool="enrich_contact",
            operation_ref="a",
            code="RATE_LIMITED",
            category="rate_limit",
            scope="service",
            retry={"directive": "after_delay", "not_before": not_before.isoformat(), "max_attempts_remaining": 2},
            next_action="wait_and_retry",
            safe_details={},
        )
    )
    with time_machine.travel(not_before + timedelta(seconds=1)):
        assert agent.attempt("a", tool="enrich_contact", fingerprint=FP1).status_code == 201


def test_a_resource_failure_is_listed_as_skipped_for_its_run_and_halts_nothing(agent) -> None:
    agent.envelope(
        {
            "code": "VALIDATION_FAILED",
            "category": "validation",
            "retryable": False,
            "scope": "resource",
            "resource_id": "contact_4127",
            "correlation_id": "c-88a1",
            "tool": "enrich_contact",
            "operation_ref": "enrich/4127",
            "run_id": "run_e",
        },
        content_type='application/json; profile="compact"',
    )
    skipped = agent.get("/api/v1/runs/run_e/skipped").json()
    assert skipped == {
        "run_id": "run_e",
        "skipped": [
            {
                "resource_id": "contact_4127",
                "correlation_id": "c-88a1",
                "code": "VALIDATION_FAILED",
                "operation_ref": "enrich/4127",
                "occurred_at": skipped["skipped"][0]["occurred_at"],
            }
        ],
    }
    assert agent.attempt("enrich/4128", tool="enrich_contact", fingerprint=FP1).status_code == 201


def test_the_tool_must_match_the_steps_tool(agent) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=FP1)
    response = agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    assert response.status_code == 409
    assert response.json()["code"] == "tool_mismatch"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tool": "send_email"}, "input_fingerprint"),
        ({"tool": "send_email", "input_fingerprint": "xyz"}, "input_fingerprint"),
        ({"tool": "Send Email", "input_fingerprint": FP1}, "tool"),
        ({"tool": "send_email", "input_fingerprint": FP1, "extra": 1}, "extra"),
    ],
)
def test_a_bad_attempt_body_is_422_naming_the_field(agent, body, field) -> None:
    response = agent.post("/api/v1/steps/x/attempts", body)
    assert response.status_code == 422
    assert field in [error["field"] for error in response.json()["errors"]]


def test_a_replayed_attempt_key_gets_the_same_grant_not_a_refusal(agent) -> None:
    first = agent.attempt(REF, tool="send_email", fingerprint=FP1, headers={"HTTP_IDEMPOTENCY_KEY": "a-1"})
    again = agent.attempt(REF, tool="send_email", fingerprint=FP1, headers={"HTTP_IDEMPOTENCY_KEY": "a-1"})
    assert first.status_code == again.status_code == 201
    assert again.json()["attempt"] == 1
    assert Step.objects.get().attempts == 1


def test_a_replayed_refusal_is_the_stored_refusal(agent) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=FP1)
    agent.envelope(error_envelope())
    first = agent.attempt(REF, tool="send_email", fingerprint=FP1, headers={"HTTP_IDEMPOTENCY_KEY": "a-2"})
    again = agent.attempt(REF, tool="send_email", fingerprint=FP1, headers={"HTTP_IDEMPOTENCY_KEY": "a-2"})
    assert again.status_code == first.status_code == 409
    assert again.json() == first.json()


def test_the_same_attempt_key_on_another_step_is_422(agent) -> None:
    agent.attempt("one", tool="send_email", fingerprint=FP1, headers={"HTTP_IDEMPOTENCY_KEY": "a-3"})
    response = agent.attempt("two", tool="send_email", fingerprint=FP1, headers={"HTTP_IDEMPOTENCY_KEY": "a-3"})
    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"


def test_another_teams_step_is_404_for_verification(agent, other_agent) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=FP1)
    assert other_agent.verify(REF, "committed").status_code == 404


# --- verification ------------------------------------------------------------------------------


def test_not_found_inside_the_window_keeps_verifying_and_says_when_to_look_again(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    agent.envelope(unknown_outcome(tool="create_invoice"))
    answer = agent.verify(REF, "not_found").json()
    assert answer["step"]["state"] == "verifying"
    assert answer["directive"]["action"] == "verify"
    assert answer["directive"]["not_before"] is not None


def test_not_found_after_the_window_permits_a_retry_with_the_same_ref(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    agent.envelope(unknown_outcome(tool="create_invoice"))
    with time_machine.travel(datetime.now(UTC) + timedelta(seconds=301)):
        answer = agent.verify(REF, "not_found").json()
        assert (answer["step"]["state"], answer["step"]["reason"]) == ("retry_ready", "verified_not_found")
        assert agent.attempt(REF, tool="create_invoice", fingerprint=FP1).json()["attempt"] == 2


def test_an_unavailable_lookup_escalates(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    agent.envelope(unknown_outcome(tool="create_invoice"))
    answer = agent.verify(REF, "unavailable").json()
    assert (answer["step"]["state"], answer["step"]["reason"]) == ("escalated", "verification_unavailable")


def test_a_bad_verification_body_is_422(agent) -> None:
    agent.attempt(REF, tool="create_invoice", fingerprint=FP1)
    response = agent.verify(REF, "maybe")
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "outcome"
    naive = agent.verify(REF, "committed", checked_at="2026-11-29T12:00:00")
    assert naive.status_code == 422


def test_a_success_after_the_grant_reports_the_attempt(agent) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=FP1)
    agent.envelope(success_envelope())
    refused(agent.attempt(REF, tool="send_email", fingerprint=FP1), "already_committed")
