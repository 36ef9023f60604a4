"""GET /api/v1/teams/{team}/queue and /steps/{ref} (contract §10) for reviewer tokens."""

from __future__ import annotations

from typing import Any

import pytest
import time_machine
from django.utils import timezone

from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient, error_envelope
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db


def refs(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [step["operation_ref"] for step in response.json()["results"]]


def test_each_queue_holds_its_states_oldest_first(
    rita_api: ReviewerClient, agent: AgentClient, awaiting: Step, verifying: Step
) -> None:
    later = post_envelope(agent, approval_envelope(operation_ref="run_8/charge_9"))
    escalated = post_envelope(
        agent, error_envelope(operation_ref="run_8/mail", next_action="escalate", tool="send_email")
    )
    post_envelope(agent, error_envelope(operation_ref="run_8/needs_input"))  # needs_input: in no queue here

    assert refs(rita_api.queue("approvals")) == [awaiting.operation_ref, later.operation_ref]
    assert refs(rita_api.queue()) == [awaiting.operation_ref, later.operation_ref]  # approvals by default
    assert refs(rita_api.queue("verifications")) == [verifying.operation_ref]
    assert refs(rita_api.queue("escalations")) == [escalated.operation_ref]


def test_the_queue_is_cursor_paginated_like_the_step_list(rita_api: ReviewerClient, agent: AgentClient) -> None:
    made = [post_envelope(agent, approval_envelope(operation_ref=f"run_9/charge_{n}")).operation_ref for n in range(5)]

    seen: list[str] = []
    response = rita_api.queue("approvals", limit=2)
    while True:
        body = response.json()
        assert set(body) == {"results", "next"}
        assert len(body["results"]) <= 2
        seen += refs(response)
        if body["next"] is None:
            break
        assert body["next"].startswith("http://testserver/api/v1/teams/acme/queue?")
        response = rita_api.http.get(body["next"])

    assert seen == made


def test_queue_items_are_the_step_shape(rita_api: ReviewerClient, agent: AgentClient, awaiting: Step) -> None:
    item = rita_api.queue("approvals").json()["results"][0]
    agents_view = agent.step(awaiting.operation_ref).json()

    assert item == agents_view


@pytest.mark.parametrize("params", [{"kind": "waiting"}, {"kind": "held"}, {"limit": 0}, {"limit": 201}, {"x": 1}])
def test_a_bad_query_is_422(rita_api: ReviewerClient, params: dict[str, Any]) -> None:
    response = rita_api.http.get("/api/v1/teams/acme/queue", params)

    assert response.status_code == 422
    assert response["Content-Type"].startswith("application/problem+json")


def test_a_viewer_reads_the_queue_and_the_step(viewer: Any, awaiting: Step) -> None:
    vic = token_for(viewer)

    assert refs(vic.queue()) == [awaiting.operation_ref]
    assert vic.step(awaiting.operation_ref).status_code == 200


def test_the_step_has_the_agent_apis_shape_and_etag_and_honours_if_none_match(
    rita_api: ReviewerClient, agent: AgentClient, awaiting: Step
) -> None:
    response = rita_api.step(awaiting.operation_ref)
    agents = agent.step(awaiting.operation_ref)

    assert response.status_code == 200
    assert response.json() == agents.json()
    assert response["ETag"] == agents["ETag"] == f'"{awaiting.pk}.{awaiting.version}"'

    unchanged = rita_api.step(awaiting.operation_ref, HTTP_IF_NONE_MATCH=response["ETag"])
    assert unchanged.status_code == 304
    assert unchanged["ETag"] == response["ETag"]

    assert agent.envelope(approval_envelope(operation_ref=awaiting.operation_ref, attempt=2)).status_code == 201
    changed = rita_api.step(awaiting.operation_ref, HTTP_IF_NONE_MATCH=response["ETag"])
    assert changed.status_code == 200
    assert changed["ETag"] != response["ETag"]


def test_a_ref_with_a_slash_is_url_encoded_and_an_unknown_one_is_404(rita_api: ReviewerClient, awaiting: Step) -> None:
    assert rita_api.http.get("/api/v1/teams/acme/steps/run_7%2Fcharge_1").status_code == 200
    missing = rita_api.step("run_7/nothing")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"
    assert rita_api.step("x" * 201).status_code == 404


def test_a_queue_page_costs_the_same_queries_whatever_the_queue_holds(
    rita_api: ReviewerClient, agent: AgentClient
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.envelopes.test_proposed_input_api import attempt

    def page_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert rita_api.queue("approvals", limit=50).status_code == 200
        return len(queries)

    for n in range(3):
        post_envelope(agent, approval_envelope(operation_ref=f"run_q/{n}"))
    few = page_queries()
    for n in range(3, 30):
        ref = f"run_q/{n}"
        if n % 2:
            assert attempt(agent, {"n": n}, ref=ref).status_code == 201  # some with a proposal
        post_envelope(agent, approval_envelope(operation_ref=ref, tool="issue_refund" if n % 2 else "charge_card"))
    assert page_queries() == few


def test_an_unknown_path_under_the_teams_api_is_still_a_problem_404(rita_api: ReviewerClient) -> None:
    response = rita_api.http.get("/api/v1/teams/acme/elsewhere")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/problem+json")


def test_reviewer_tokens_are_throttled_per_token(rita_api: ReviewerClient, reviewer: Any, settings: Any) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api_key": "2/min"}}
    other = token_for(reviewer)
    mid_minute = timezone.now().replace(second=20, microsecond=0)

    with time_machine.travel(mid_minute, tick=False):  # all in one window
        assert [rita_api.queue().status_code for _ in range(3)] == [200, 200, 429]
        throttled = rita_api.queue()
        assert throttled.json()["code"] == "throttled"
        assert throttled["Retry-After"] == "40"
        assert other.queue().status_code == 200
