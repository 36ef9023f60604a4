"""Dashboard fixtures: reviewers of each role, logged-in clients and steps in each held state."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import Team
from envelopes.configuration import tool_configure
from envelopes.models import Step
from tests.conftest import AgentClient, error_envelope, logged_in, unknown_outcome


def approval_envelope(**overrides: Any) -> dict[str, Any]:
    """An error envelope that asks a human to approve the write first."""
    body = {
        "code": "AMOUNT_OVER_LIMIT",
        "category": "authorization",
        "commit_state": "not_committed",
        "retry": {"directive": "never", "max_attempts_remaining": 0},
        "next_action": "request_approval",
        "safe_details": {"limit": "1000", "field": "amount"},
        "agent_message": "The charge is above the limit; asking a reviewer.",
        "tool": "charge_card",
    }
    body.update(overrides)
    return error_envelope(**body)


def outage_envelope(**overrides: Any) -> dict[str, Any]:
    """A service-wide failure: it halts the tool until not_before."""
    not_before = (timezone.now() + timedelta(hours=1)).isoformat()
    body = {
        "code": "UPSTREAM_UNAVAILABLE",
        "category": "dependency",
        "commit_state": "not_committed",
        "retry": {"directive": "after_delay", "not_before": not_before, "max_attempts_remaining": 2},
        "next_action": "wait_and_retry",
        "scope": "service",
        "tool": "charge_card",
        "safe_details": {},
    }
    body.update(overrides)
    return error_envelope(**body)


def post_envelope(agent: AgentClient, body: dict[str, Any]) -> Step:
    response = agent.envelope(body)
    assert response.status_code == 201, response.content
    return Step.objects.select_related("tool", "team").get(envelopes__pk=response.json()["envelope_id"])


@pytest.fixture
def reviewer(make_reviewer: Callable[..., Any]) -> Any:
    return make_reviewer("rita", "reviewer")


@pytest.fixture
def second_reviewer(make_reviewer: Callable[..., Any]) -> Any:
    return make_reviewer("sam", "reviewer")


@pytest.fixture
def viewer(make_reviewer: Callable[..., Any]) -> Any:
    return make_reviewer("vic", "viewer")


@pytest.fixture
def outsider(make_reviewer: Callable[..., Any], other_team: Team) -> Any:
    """A reviewer of another team."""
    return make_reviewer("otto", "reviewer", in_team=other_team)


@pytest.fixture
def rita(reviewer: Any) -> Client:
    return logged_in(reviewer)


@pytest.fixture
def awaiting(agent: AgentClient) -> Step:
    return post_envelope(agent, approval_envelope(operation_ref="run_7/charge_1", run_id="run_7"))


@pytest.fixture
def verifying(agent: AgentClient) -> Step:
    return post_envelope(
        agent, unknown_outcome(tool="create_invoice", operation_ref="run_7/invoice_2", run_id="run_7")
    )


@pytest.fixture
def four_eyes_tool(team: Team) -> None:
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 2}, actor="test")


HTMX = {"HTTP_HX_REQUEST": "true"}


def htmx_headers(target: str) -> dict[str, str]:
    return {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target}


def propose(agent: AgentClient, ref: str, tool_input: dict[str, Any] | None, *, tool: str = "charge_card") -> Any:
    """An attempt on `ref` carrying `tool_input` (None: only a fingerprint), as an agent sends it."""
    from envelopes.proposal import input_fingerprint

    if tool_input is None:
        return agent.attempt(ref, tool=tool, fingerprint=input_fingerprint({"unsent": ref}))
    response = agent.attempt(ref, tool=tool, fingerprint=input_fingerprint(tool_input), input=tool_input)
    assert response.status_code == 201, response.content
    return response


def held_with_input(agent: AgentClient, ref: str, tool_input: dict[str, Any] | None, **envelope: Any) -> Step:
    """A step awaiting approval whose attempt proposed `tool_input`."""
    propose(agent, ref, tool_input)
    return post_envelope(agent, approval_envelope(operation_ref=ref, **envelope))
