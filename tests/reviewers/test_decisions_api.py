"""POST /api/v1/teams/{team}/steps/{ref}/decisions (contract §10): every answer, and nothing
decided by any refusal."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import AuditEvent, Decision, Step
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db

REF = "run_7/charge_1"


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == code
    assert body["status"] == status
    return body


def assert_nothing_decided(step: Step) -> None:
    before = (step.state, step.version)
    step.refresh_from_db()
    assert (step.state, step.version) == before
    assert not Decision.objects.filter(step=step).exists()
    assert not AuditEvent.objects.filter(step=step, kind="decision").exists()


def test_an_approval_with_the_current_etag_is_201_with_the_decision_and_the_step(
    rita_api: ReviewerClient, awaiting: Step
) -> None:
    etag = rita_api.etag(REF)

    response = rita_api.decide(REF, {"action": "approve", "reason": "within budget"}, etag=etag)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["decision"] == {
        "action": "approve",
        "reviewer": "rita",
        "decided_by": {"kind": "reviewer", "reviewer": "rita", "rule": None, "grant": None},
        "on_behalf_of": None,  # §12: the away member a delegate decided for
        "reason": "within budget",
        "decided_at": body["decision"]["decided_at"],
        "input_fingerprint": body["decision"]["input_fingerprint"],
        "edited": False,
        "receipt": body["decision"]["receipt"],  # contract §13: tests/evidence/test_receipts.py
    }
    assert body["decision"]["receipt"].count(".") == 2
    assert body["step"]["operation_ref"] == REF
    assert (body["step"]["state"], body["step"]["reason"]) == ("retry_ready", "approved")
    assert body["step"]["decisions"][-1]["reviewer"] == "rita"
    awaiting.refresh_from_db()
    assert awaiting.state == "retry_ready"
    assert response["ETag"] == f'"{awaiting.pk}.{awaiting.version}"' != etag


def test_a_reject_cancels_the_step(rita_api: ReviewerClient, awaiting: Step) -> None:
    response = rita_api.decide(REF, {"action": "reject", "reason": "duplicate"}, etag=rita_api.etag(REF))

    assert response.status_code == 201
    awaiting.refresh_from_db()
    assert (awaiting.state, awaiting.reason) == ("cancelled", "rejected")


def test_verifying_steps_take_mark_committed_and_permit_retry(rita_api: ReviewerClient, verifying: Step) -> None:
    ref = verifying.operation_ref
    response = rita_api.decide(ref, {"action": "mark_committed", "reason": "found it"}, etag=rita_api.etag(ref))

    assert response.status_code == 201, response.content
    verifying.refresh_from_db()
    assert (verifying.state, verifying.reason) == ("succeeded", "resolved_committed")


def test_without_if_match_it_is_428_and_nothing_is_decided(rita_api: ReviewerClient, awaiting: Step) -> None:
    assert_problem(rita_api.decide(REF, {"action": "approve"}), 428, "precondition_required")
    assert_problem(rita_api.decide(REF, {"action": "approve"}, etag="*"), 428, "precondition_required")
    assert_nothing_decided(awaiting)


def test_a_stale_etag_is_412_step_changed_with_the_step_as_it_is_now(
    rita_api: ReviewerClient, awaiting: Step, agent: Any
) -> None:
    stale = rita_api.etag(REF)
    # The agent posts again: the step moves on (and back to awaiting approval) under the reviewer.
    from tests.approvals.conftest import approval_envelope

    assert agent.envelope(approval_envelope(operation_ref=REF, attempt=2)).status_code == 201
    awaiting.refresh_from_db()
    current = f'"{awaiting.pk}.{awaiting.version}"'

    body = assert_problem(rita_api.decide(REF, {"action": "approve"}, etag=stale), 412, "step_changed")

    assert body["step"]["operation_ref"] == REF
    assert not Decision.objects.filter(step=awaiting).exists()
    # The fresh tag works.
    assert rita_api.decide(REF, {"action": "approve"}, etag=current).status_code == 201


def test_a_decided_step_is_412_for_a_second_decider_with_the_same_etag(
    rita_api: ReviewerClient, second_reviewer: Any, awaiting: Step
) -> None:
    etag = rita_api.etag(REF)
    assert rita_api.decide(REF, {"action": "reject", "reason": "no"}, etag=etag).status_code == 201

    sam = token_for(second_reviewer)
    body = assert_problem(sam.decide(REF, {"action": "approve"}, etag=etag), 412, "step_changed")

    assert body["step"]["state"] == "cancelled"
    assert body["step"]["decisions"][0]["reviewer"] == "rita"
    assert Decision.objects.filter(step=awaiting).count() == 1


def test_a_weak_etag_never_matches(rita_api: ReviewerClient, awaiting: Step) -> None:
    etag = rita_api.etag(REF)
    assert_problem(rita_api.decide(REF, {"action": "approve"}, etag=f"W/{etag}"), 412, "step_changed")
    assert_nothing_decided(awaiting)


def test_a_viewer_is_403_role_required(viewer: Any, awaiting: Step) -> None:
    vic = token_for(viewer)
    etag = vic.etag(REF)  # viewers read

    assert_problem(vic.decide(REF, {"action": "approve"}, etag=etag), 403, "role_required")
    # ... before anything the body says
    assert_problem(vic.decide(REF, {"action": "nonsense"}, etag=etag), 403, "role_required")
    assert_nothing_decided(awaiting)


def test_another_teams_step_is_404(rita_api: ReviewerClient, other_awaiting: Step, other_team: Team) -> None:
    # The same ref exists in globex, where rita is no member; acme has no such step.
    assert_problem(rita_api.decide(REF, {"action": "approve"}, etag='"1.1"'), 404, "not_found")
    elsewhere = ReviewerClient(rita_api.raw_token, team="globex")
    etag = f'"{other_awaiting.pk}.{other_awaiting.version}"'
    assert_problem(elsewhere.decide(REF, {"action": "approve"}, etag=etag), 404, "not_found")
    assert_problem(elsewhere.step(REF), 404, "not_found")
    assert_nothing_decided(other_awaiting)


def test_an_unknown_team_and_an_unknown_step_are_404(rita_api: ReviewerClient, awaiting: Step) -> None:
    nowhere = ReviewerClient(rita_api.raw_token, team="initech")
    assert_problem(nowhere.decide(REF, {"action": "approve"}, etag='"1.1"'), 404, "not_found")
    assert_problem(rita_api.decide("run_7/nope", {"action": "approve"}, etag='"1.1"'), 404, "not_found")


def test_an_action_the_state_does_not_allow_is_409(rita_api: ReviewerClient, awaiting: Step) -> None:
    etag = rita_api.etag(REF)
    body = assert_problem(
        rita_api.decide(REF, {"action": "mark_committed", "reason": "x"}, etag=etag), 409, "decision_not_allowed"
    )
    assert "awaiting approval" in body["detail"]
    assert_nothing_decided(awaiting)


def test_a_missing_reason_is_422_naming_the_field(rita_api: ReviewerClient, awaiting: Step) -> None:
    etag = rita_api.etag(REF)
    for body in ({"action": "reject"}, {"action": "reject", "reason": "   "}):
        problem = assert_problem(rita_api.decide(REF, body, etag=etag), 422, "reason_required")
        assert problem["errors"] == [{"field": "reason", "rule": "required"}]
    assert_nothing_decided(awaiting)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "launch"}, "action"),
        ({}, "action"),
        ({"action": "approve", "extra": 1}, "extra"),
        ({"action": "approve", "reason": 5}, "reason"),
        ({"action": "approve", "reason": "x" * 1001}, "reason"),
        ({"action": "approve", "input": [1, 2]}, "input"),
        ({"action": "reject", "reason": "no", "input": {"amount": 1}}, "input"),
        (["approve"], "body"),
    ],
)
def test_a_bad_body_is_422_naming_the_field(rita_api: ReviewerClient, awaiting: Step, body: Any, field: str) -> None:
    response = rita_api.decide(REF, body, etag=rita_api.etag(REF))

    assert response.status_code == 422, response.content
    assert response["Content-Type"].startswith("application/problem+json")
    assert field in [error["field"] for error in response.json()["errors"]]
    assert_nothing_decided(awaiting)


def test_malformed_json_is_400(rita_api: ReviewerClient, awaiting: Step) -> None:
    assert_problem(rita_api.decide(REF, b'{"action": ', etag=rita_api.etag(REF)), 400, "malformed_json")
    assert_nothing_decided(awaiting)


@pytest.mark.parametrize(
    "body",
    [
        b'{"action": "approve", "input": {"amount": 100, "to": "acct_1", "amount": 100000}}',
        b'{"action": "reject", "reason": "no", "action": "approve"}',
        b'{"action": "approve", "input": {"amount": NaN}}',
    ],
)
def test_an_ambiguous_body_is_400_and_decides_nothing(rita_api: ReviewerClient, awaiting: Step, body: bytes) -> None:
    # A key twice: json.loads would keep the last, so the reviewer might approve what they did not mean.
    response = rita_api.decide(REF, body, etag=rita_api.etag(REF))
    assert_problem(response, 400, "malformed_json")
    assert_nothing_decided(awaiting)


def test_the_wrong_method_is_405(rita_api: ReviewerClient, awaiting: Step) -> None:
    response = rita_api.http.get("/api/v1/teams/acme/steps/run_7%2Fcharge_1/decisions")
    assert_problem(response, 405, "method_not_allowed")
    response = rita_api.http.delete("/api/v1/teams/acme/steps/run_7%2Fcharge_1")
    assert_problem(response, 405, "method_not_allowed")


def test_four_eyes_apply_to_the_api_like_the_form(
    rita_api: ReviewerClient, second_reviewer: Any, team: Team, awaiting: Step
) -> None:
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")

    first = rita_api.decide(REF, {"action": "approve"}, etag=rita_api.etag(REF))
    assert first.status_code == 201
    assert first.json()["step"]["state"] == "awaiting_approval"
    # The same reviewer cannot count twice.
    again = rita_api.decide(REF, {"action": "approve"}, etag=first["ETag"])
    assert_problem(again, 409, "decision_not_allowed")

    sam = token_for(second_reviewer)
    second = sam.decide(REF, {"action": "approve"}, etag=first["ETag"])
    assert second.status_code == 201, second.content
    assert second.json()["step"]["state"] == "retry_ready"
    assert [d["reviewer"] for d in second.json()["step"]["decisions"]] == ["rita", "sam"]


def test_if_match_may_list_several_tags(rita_api: ReviewerClient, awaiting: Step) -> None:
    etag = rita_api.etag(REF)

    response = rita_api.decide(REF, {"action": "approve"}, etag=f'"0.0", {etag}')

    assert response.status_code == 201, response.content
