"""The reviewer API on steps held for a group (contract §12), with real reviewer tokens: outside
the group a decision is 403 problem+json `role_required` naming the group, the step says who
decides (`approvals_required`, `approver_group`), and `?for=me` lists what the caller may decide."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.groups import group_member_add
from envelopes.configuration import tool_configure
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.reviewers.conftest import token_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def finance_step(team, agent, make_reviewer) -> Any:  # type: ignore[no-untyped-def]
    group_member_add(team=team, name="finance", user=make_reviewer("fay", "reviewer"))
    tool_configure(
        team=team, name="charge_card", settings={"approver_group": "finance", "required_approvals": 2}, actor="t"
    )
    return post_envelope(agent, approval_envelope(operation_ref="run_7/charge_1"))


def test_outside_the_group_a_decision_is_403_role_required_naming_it(finance_step, make_reviewer) -> None:
    rita = token_for(make_reviewer("rita", "reviewer"))
    step = rita.step(finance_step.operation_ref).json()
    assert (step["approver_group"], step["approvals_required"]) == ("finance", 2)
    answer = rita.decide(finance_step.operation_ref, {"action": "approve"}, etag=rita.etag(finance_step.operation_ref))
    assert answer.status_code == 403
    assert answer["Content-Type"].startswith("application/problem+json")
    problem = answer.json()
    assert problem["code"] == "role_required"
    assert problem["group"] == "finance"
    assert "finance" in problem["detail"]
    finance_step.refresh_from_db()
    assert finance_step.state == "awaiting_approval" and not finance_step.decisions.exists()


def test_a_member_of_the_group_approves_and_the_count_goes_on(finance_step, django_user_model) -> None:
    fay = token_for(django_user_model.objects.get(username="fay"))
    answer = fay.decide(finance_step.operation_ref, {"action": "approve"}, etag=fay.etag(finance_step.operation_ref))
    assert answer.status_code == 201, answer.content
    finance_step.refresh_from_db()
    assert finance_step.state == "awaiting_approval"  # 1 of 2


def test_for_me_lists_only_what_the_caller_may_decide(finance_step, agent, team, make_reviewer) -> None:
    tool_configure(team=team, name="refund", settings={}, actor="t")
    anyone = post_envelope(agent, approval_envelope(operation_ref="run_8/refund", tool="refund"))
    rita = token_for(make_reviewer("rita", "reviewer"))
    everything = {s["operation_ref"] for s in rita.queue().json()["results"]}
    assert everything == {finance_step.operation_ref, anyone.operation_ref}
    mine = rita.queue(**{"for": "me"}).json()["results"]
    assert [s["operation_ref"] for s in mine] == [anyone.operation_ref]
    fay = token_for(_user("fay"))
    assert {s["operation_ref"] for s in fay.queue(**{"for": "me"}).json()["results"]} == everything
    bad = rita.queue(**{"for": "you"})
    assert bad.status_code in (400, 422)
    assert "for" in bad.content.decode()


def _user(name: str) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=name)
