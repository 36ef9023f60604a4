"""The queues page reads a page's worth of rows however many steps are held: the same number of
queries for 5 held steps as for 50, and further steps by keyset pages (`?<queue>_after=`) that
follow the queue's order across the user's teams."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import queries
from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, post_envelope, unknown_outcome
from tests.conftest import AgentClient, error_envelope, logged_in

pytestmark = pytest.mark.django_db


def hold(agent: AgentClient, count: int, prefix: str) -> list[Step]:
    """`count` steps in each of the four queues."""
    steps = []
    for n in range(count):
        steps.append(post_envelope(agent, approval_envelope(operation_ref=f"{prefix}/approve_{n}")))
        steps.append(post_envelope(agent, unknown_outcome(operation_ref=f"{prefix}/verify_{n}")))
        steps.append(post_envelope(agent, error_envelope(operation_ref=f"{prefix}/fix_{n}")))
        steps.append(
            post_envelope(
                agent,
                error_envelope(
                    operation_ref=f"{prefix}/escalate_{n}", next_action="escalate", code="LEDGER_UNREACHABLE"
                ),
            )
        )
    return steps


def queries_of_page(client: Client) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/").status_code == 200
    return len(captured)


def test_the_page_makes_as_many_queries_for_50_held_steps_as_for_5(
    make_reviewer: Any, agent: AgentClient, other_agent: AgentClient, other_team: Any, django_assert_max_num_queries
) -> None:  # type: ignore[no-untyped-def]
    make_reviewer("bea", "reviewer")
    reviewer = make_reviewer("bea", "reviewer", in_team=other_team)  # two teams: the teams' pages are merged
    client = logged_in(reviewer)
    hold(agent, 1, "acme")
    hold(other_agent, 1, "globex")
    assert Step.objects.filter(state__in=["awaiting_approval", "verifying", "needs_input", "escalated"]).count() == 8
    few = queries_of_page(client)

    hold(agent, 6, "acme-more")
    hold(other_agent, 6, "globex-more")
    assert Step.objects.count() == 56

    with django_assert_max_num_queries(few):
        html = client.get("/").content.decode()
    assert "globex-more/approve_5" in html and "acme-more/escalate_5" in html


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "QUEUE_LIMIT", 2)


def approvals_on(response: Any) -> queries.QueueView:
    return next(q for q in response.context["step_queues"] if q.queue.key == "approvals")


def test_keyset_pages_walk_a_queue_in_order_across_teams(
    small_pages: None, make_reviewer: Any, agent: AgentClient, other_agent: AgentClient, other_team: Any
) -> None:
    make_reviewer("bea", "reviewer")
    reviewer = make_reviewer("bea", "reviewer", in_team=other_team)
    client = logged_in(reviewer)
    start = timezone.now() - timedelta(hours=1)
    expected = []
    for n in range(5):
        # The teams take turns, and each request expires a minute after the one before.
        with time_machine.travel(start + timedelta(minutes=n), tick=False):
            step = post_envelope(agent if n % 2 else other_agent, approval_envelope(operation_ref=f"charge/{n}"))
        expected.append(step.operation_ref)

    seen = []
    path = "/"
    for _ in range(3):
        response = client.get(path)
        queue = approvals_on(response)
        seen += [step.operation_ref for step in queue.rows]
        if not queue.next_cursor:
            break
        assert f"approvals_after={queue.next_cursor}" in response.content.decode()
        path = f"/?approvals_after={queue.next_cursor}"

    assert seen == expected
    assert queue.after is not None and not queue.next_cursor  # the last page says so
    assert "Back to the first" in response.content.decode()


def test_a_page_keeps_the_filters_and_the_other_queues_places(
    small_pages: None, rita: Client, agent: AgentClient
) -> None:
    for n in range(3):
        post_envelope(agent, approval_envelope(operation_ref=f"charge/{n}"))
    first = approvals_on(rita.get("/?tool=charge_card"))
    assert first.next_cursor

    html = rita.get(f"/?tool=charge_card&approvals_after={first.next_cursor}").content.decode()

    assert "tool=charge_card" in html.split("Back to the first")[0].rsplit("href=", 1)[-1]


def test_a_crafted_cursor_is_a_400(rita: Client) -> None:
    for cursor in (
        "cD1ub3RhZGF0ZQ==",
        "W10",
        "WzEsMiwzXQ",
        "WyJ4IiwieSIsMV0",
        "%00",
        "WyIyMDI2LTEyLTAxVDAwOjAwOjAwIiwiMjAyNi0xMi0wMVQwMDowMDowMFoiLDFd",
    ):
        response = rita.get(f"/?approvals_after={cursor}")
        assert response.status_code == 400, cursor


def test_a_step_without_an_expiry_comes_last_on_both_engines(
    small_pages: None, rita: Client, agent: AgentClient
) -> None:
    timeless = post_envelope(agent, approval_envelope(operation_ref="charge/timeless"))
    Step.objects.filter(pk=timeless.pk).update(expires_at=None)
    post_envelope(agent, approval_envelope(operation_ref="charge/a"))
    post_envelope(agent, approval_envelope(operation_ref="charge/b"))

    first = approvals_on(rita.get("/"))
    second = approvals_on(rita.get(f"/?approvals_after={first.next_cursor}"))

    assert [s.operation_ref for s in first.rows] == ["charge/a", "charge/b"]
    assert [s.operation_ref for s in second.rows] == ["charge/timeless"]
    assert (
        queries.queue_cursor_decode(second.queue, queries.queue_cursor_encode(second.queue, (None, timezone.now(), 7)))[
            0
        ]
        is None
    )
