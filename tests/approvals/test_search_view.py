"""GET /search?q=: one step by operation_ref or correlation_id opens it; anything else lists."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from approvals import queries
from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient, error_envelope, logged_in

pytestmark = pytest.mark.django_db


def test_one_operation_ref_lands_on_the_step(rita: Client, awaiting: Step) -> None:
    response = rita.get("/search", {"q": "run_7/charge_1"})

    assert response.status_code == 302
    assert response["Location"] == f"/steps/{awaiting.pk}/"


def test_one_correlation_id_lands_on_the_step(rita: Client, agent: AgentClient) -> None:
    step = post_envelope(agent, approval_envelope(operation_ref="r/1", correlation_id="corr-7f3a"))

    response = rita.get("/search", {"q": "  corr-7f3a  "})

    assert response["Location"] == f"/steps/{step.pk}/"


def test_a_correlation_id_of_a_later_envelope_finds_its_step(rita: Client, agent: AgentClient) -> None:
    step = post_envelope(agent, approval_envelope(operation_ref="r/2", correlation_id="first"))
    post_envelope(agent, approval_envelope(operation_ref="r/2", correlation_id="second"))

    assert rita.get("/search", {"q": "second"})["Location"] == f"/steps/{step.pk}/"


def test_a_run_id_lists_its_steps(rita: Client, awaiting: Step, verifying: Step) -> None:
    response = rita.get("/search", {"q": "run_7"})

    assert response.status_code == 200
    assert {s.pk for s in response.context["result"].steps} == {awaiting.pk, verifying.pk}
    assert "Same run_id or resource_id" in response.content.decode()


def test_a_resource_id_lists_its_steps(rita: Client, agent: AgentClient) -> None:
    step = post_envelope(
        agent,
        error_envelope(operation_ref="r/3", scope="resource", resource_id="cust_42", run_id="run_x"),
    )

    response = rita.get("/search", {"q": "cust_42"})

    assert [s.pk for s in response.context["result"].steps] == [step.pk]


def test_no_match_says_so(rita: Client, awaiting: Step) -> None:
    html = rita.get("/search", {"q": "nothing-like-it"}).content.decode()

    assert "No step of your teams matches “nothing-like-it”" in html


def test_another_teams_step_is_not_found(
    make_reviewer: Any, other_team: Any, other_agent: AgentClient, awaiting: Step
) -> None:
    otto = logged_in(make_reviewer("otto", "reviewer", in_team=other_team))

    response = otto.get("/search", {"q": "run_7/charge_1"})

    assert response.status_code == 200
    assert response.context["result"].steps == []


def test_a_partial_operation_ref_offers_close_matches(rita: Client, awaiting: Step) -> None:
    response = rita.get("/search", {"q": "charge_"})

    assert [s.pk for s in response.context["result"].partial] == [awaiting.pk]


def test_a_partial_search_looks_only_among_the_latest_steps(
    rita: Client, agent: AgentClient, awaiting: Step, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(queries, "PARTIAL_SEARCH_SPAN", 2)
    newer = [post_envelope(agent, error_envelope(operation_ref=f"run_8/email_{n}")) for n in range(2)]

    older = rita.get("/search", {"q": "charge_"})
    assert older.context["result"].partial == []  # awaiting is the third-latest: out of reach
    assert "none of the latest 2 contains it" in older.content.decode()
    latest = rita.get("/search", {"q": "email_"})
    assert {s.pk for s in latest.context["result"].partial} == {step.pk for step in newer}


def test_search_needs_a_login(client: Client) -> None:
    assert client.get("/search", {"q": "x"})["Location"].startswith("/accounts/login/")
