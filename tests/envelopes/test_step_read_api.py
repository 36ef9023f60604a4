"""GET /api/v1/steps/{ref} and GET /api/v1/steps."""

from __future__ import annotations

import pytest

from tests.conftest import error_envelope, success_envelope

pytestmark = pytest.mark.django_db

STEP_KEYS = {
    "operation_ref",
    "tool",
    "state",
    "held",
    "reason",
    "correlation_id",
    "run_id",
    "trace_id",
    "approvals_required",  # v1.2, §12: the quorum
    "approver_group",  # v1.2, §12: who alone decides, or null
    "attempts",
    "max_attempts",
    "not_before",
    "deadline",
    "directive",
    "last_envelope",
    "decisions",
    "proposal",
    "policy",  # v1.2, §11: the rule or grant that last acted on the step
    "created_at",
    "updated_at",
    "url",
}


def test_a_step_with_a_slash_in_its_ref_is_read_url_encoded(agent) -> None:
    agent.envelope(error_envelope(operation_ref="run_81/step_4", run_id="run_81"))
    response = agent.get("/api/v1/steps/run_81%2Fstep_4")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == STEP_KEYS
    assert body["operation_ref"] == "run_81/step_4"
    assert body["held"] is True
    assert body["attempts"] == 0
    assert body["max_attempts"] == 3
    assert body["decisions"] == []


def test_it_answers_304_for_a_matching_etag_and_200_after_a_change(agent) -> None:
    agent.envelope(error_envelope())
    first = agent.step("run_81/step_4")
    etag = first["ETag"]
    assert agent.step("run_81/step_4", HTTP_IF_NONE_MATCH=etag).status_code == 304
    agent.envelope(success_envelope())
    changed = agent.step("run_81/step_4", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200
    assert changed.json()["state"] == "succeeded"
    assert changed["ETag"] != etag


def test_another_teams_step_is_404(agent, other_agent) -> None:
    agent.envelope(error_envelope())
    response = other_agent.step("run_81/step_4")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/problem+json")


def test_an_unknown_step_is_404(agent) -> None:
    assert agent.step("nope").status_code == 404


def test_the_list_filters_and_paginates_with_a_cursor(agent) -> None:
    for n in range(5):
        agent.envelope(error_envelope(operation_ref=f"r{n}", run_id="run_a" if n < 3 else "run_b"))
    agent.envelope(success_envelope(operation_ref="done"))
    page = agent.get("/api/v1/steps", {"run_id": "run_a", "limit": 2}).json()
    assert [step["operation_ref"] for step in page["results"]] == ["r2", "r1"]
    rest = agent.get(page["next"]).json()
    assert [step["operation_ref"] for step in rest["results"]] == ["r0"]
    assert rest["next"] is None
    assert [s["operation_ref"] for s in agent.get("/api/v1/steps", {"state": "succeeded"}).json()["results"]] == [
        "done"
    ]
    assert len(agent.get("/api/v1/steps", {"tool": "send_email"}).json()["results"]) == 6


def test_the_list_refuses_an_unknown_state_or_parameter(agent) -> None:
    bad_state = agent.get("/api/v1/steps", {"state": "sleeping"})
    assert bad_state.status_code == 422
    assert bad_state.json()["errors"][0]["field"] == "state"
    assert agent.get("/api/v1/steps", {"colour": "red"}).status_code == 422


def test_the_list_never_shows_another_teams_steps(agent, other_agent) -> None:
    agent.envelope(error_envelope())
    assert other_agent.get("/api/v1/steps").json()["results"] == []


def test_a_throttled_key_gets_429_with_retry_after(agent, monkeypatch) -> None:
    from accounts.auth import ApiKeyRateThrottle

    monkeypatch.setattr(ApiKeyRateThrottle, "rate", "3/min", raising=False)
    statuses = [agent.get("/api/v1/steps").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    throttled = agent.get("/api/v1/steps")
    assert int(throttled["Retry-After"]) >= 1
    assert throttled.json()["code"] == "throttled"
