"""Fixtures of the delegation tests (contract §12), shared by the dashboard's and the reviewer
API's: alice and fay decide for finance, bob is a reviewer outside it, and a finance step that
needs two approvals."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.groups import group_member_add
from envelopes.configuration import tool_configure
from envelopes.models import Step
from tests.approvals.conftest import approval_envelope, post_envelope


@pytest.fixture
def people(make_reviewer: Any, team: Any) -> dict[str, Any]:
    """alice and fay decide for finance; bob is a reviewer outside it."""
    found = {name: make_reviewer(name, "reviewer") for name in ("alice", "bob", "fay")}
    group_member_add(team=team, name="finance", user=found["alice"])
    group_member_add(team=team, name="finance", user=found["fay"])
    return found


@pytest.fixture
def finance_step(people: dict[str, Any], team: Any, agent: Any) -> Step:
    tool_configure(
        team=team, name="charge_card", settings={"approver_group": "finance", "required_approvals": 2}, actor="t"
    )
    return post_envelope(agent, approval_envelope(operation_ref="run_7/charge_1"))
