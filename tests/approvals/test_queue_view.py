"""The queues page `/`: who sees what, filters, live partials and empty states."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from approvals import queries
from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, htmx_headers, post_envelope
from tests.conftest import AgentClient, error_envelope, logged_in

pytestmark = pytest.mark.django_db


def test_it_sends_anonymous_visitors_to_the_login_page(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_an_anonymous_htmx_poll_sends_the_whole_page_to_login(client: Client) -> None:
    response = client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://testserver/?tool=x")

    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=/%3Ftool%3Dx"


def test_it_lists_held_steps_in_their_queues(rita: Client, awaiting: Step, verifying: Step) -> None:
    response = rita.get("/")

    assert response.status_code == 200
    queues = {q.queue.key: q for q in response.context["step_queues"]}
    assert [s.pk for s in queues["approvals"].rows] == [awaiting.pk]
    assert [s.pk for s in queues["verifications"].rows] == [verifying.pk]
    assert queues["escalations"].rows == []
    assert queues["waiting"].rows == []
    html = response.content.decode()
    assert f'href="/steps/{awaiting.pk}/"' in html
    assert "data-countdown" in html  # the verification deadline counts down


def test_empty_queues_say_what_they_mean(rita: Client) -> None:
    html = rita.get("/").content.decode()

    assert "No steps wait for approval." in html
    assert "No steps wait for verification." in html
    assert "No steps are escalated." in html
    assert "No steps wait for corrected input or for a retry time." in html
    assert "No tools are halted." in html
    assert "No payload was quarantined." in html


def test_needs_input_and_waiting_steps_are_read_only(rita: Client, agent: AgentClient) -> None:
    post_envelope(agent, error_envelope(operation_ref="run_9/email"))  # correct_input -> needs_input

    response = rita.get("/")

    waiting = next(q for q in response.context["step_queues"] if q.queue.key == "waiting")
    assert [s.state for s in waiting.rows] == ["needs_input"]
    assert "read-only: the agent acts next" in response.content.decode()


def test_another_teams_steps_never_show(
    make_reviewer: Any, other_agent: AgentClient, other_team: Any, awaiting: Step
) -> None:
    post_envelope(other_agent, approval_envelope(operation_ref="globex/secret_charge"))
    otto = logged_in(make_reviewer("otto", "reviewer", in_team=other_team))

    html = otto.get("/").content.decode()

    assert "globex/secret_charge" in html
    assert "run_7/charge_1" not in html


def test_a_user_of_two_teams_sees_both_and_can_narrow_to_one(
    make_reviewer: Any, other_agent: AgentClient, other_team: Any, awaiting: Step
) -> None:
    post_envelope(other_agent, approval_envelope(operation_ref="globex/charge"))
    make_reviewer("bea", "reviewer")
    client = logged_in(make_reviewer("bea", "viewer", in_team=other_team))

    html = client.get("/").content.decode()
    assert "globex/charge" in html and "run_7/charge_1" in html

    narrowed = client.get("/?team=globex").content.decode()
    assert "globex/charge" in narrowed and "run_7/charge_1" not in narrowed


def test_it_filters_by_tool_and_by_code(rita: Client, awaiting: Step, verifying: Step) -> None:
    by_tool = rita.get("/?tool=create_invoice").context["step_queues"]
    assert [s.pk for q in by_tool for s in q.rows] == [verifying.pk]

    by_code = rita.get("/?code=amount_over_limit").context["step_queues"]
    assert [s.pk for q in by_code for s in q.rows] == [awaiting.pk]

    html = rita.get("/?code=NOTHING_LIKE_THIS").content.decode()
    assert "No steps wait for approval." in html and "(with these filters)" in html


def test_it_filters_by_age(rita: Client, agent: AgentClient) -> None:
    with time_machine.travel(timezone.now() - timedelta(hours=3), tick=False):
        old = post_envelope(agent, approval_envelope(operation_ref="run_1/old"))
    new = post_envelope(agent, approval_envelope(operation_ref="run_1/new"))

    def approvals(query: str) -> list[int]:
        queues = rita.get(f"/{query}").context["step_queues"]
        return [s.pk for s in queues[0].rows]

    assert approvals("") == [old.pk, new.pk]
    assert approvals("?age=1h") == [old.pk]
    assert approvals("?age=4h") == []
    assert approvals("?age=nonsense") == [old.pk, new.pk]  # ignored, never an error page


def test_an_htmx_poll_gets_only_the_queues_fragment(rita: Client, awaiting: Step) -> None:
    response = rita.get("/?tool=charge_card", **htmx_headers("queues"))

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="queues"')
    assert "<html" not in html
    assert 'hx-get="/?tool=charge_card"' in html  # the poll keeps the filters
    assert "run_7/charge_1" in html
    assert "HX-Request" in response["Vary"]


def test_the_nav_counts_partial_counts_each_queue(rita: Client, awaiting: Step, verifying: Step) -> None:
    response = rita.get("/queue-counts", HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    assert 'Approvals <span class="count hot">1</span>' in html
    assert 'Verifications <span class="count hot">1</span>' in html
    assert 'Escalations <span class="count">0</span>' in html


def test_every_page_carries_csrf_for_htmx_and_a_strict_csp(rita: Client) -> None:
    response = rita.get("/")

    html = response.content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in html
    assert '"allowEval":false' in html and '"includeIndicatorStyles":false' in html
    assert "<script>" not in html and " style=" not in html and "hx-on" not in html
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_the_queues_refuse_post(rita: Client) -> None:
    assert rita.post("/").status_code == 405


def test_counts_stop_at_the_cap_so_a_huge_queue_costs_no_more(rita: Client, agent: AgentClient, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(queries, "COUNT_CAP", 3)
    for n in range(4):
        post_envelope(agent, approval_envelope(operation_ref=f"run_9/charge_{n}"))
    nav = rita.get("/queue-counts").content.decode()
    assert '<span class="count hot">3+</span>' in nav
    page = rita.get("/").content.decode()
    assert 'Approvals <span class="count hot">3+</span>' in page
