"""Who decides (contract §12): reviewer groups limit who approves, rejects or edits a step held
for them, quorums of 1..5 count distinct eligible reviewers, and everyone else sees the step
read-only, "for <group>". Through the dashboard's pages, as reviewers use them."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.groups import group_member_add
from accounts.models import GroupMembership, ReviewerGroup
from envelopes.configuration import ConfigurationError, tool_configure
from envelopes.models import Step, Tool
from tests.approvals.conftest import HTMX, approval_envelope, htmx_headers, post_envelope
from tests.conftest import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def finance(team, make_reviewer) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Two finance reviewers (fay, fred), an admin outside finance (ada), and rita outside it."""
    people = {
        "fay": make_reviewer("fay", "reviewer"),
        "fred": make_reviewer("fred", "reviewer"),
        "finn": make_reviewer("finn", "reviewer"),
        "ada": make_reviewer("ada", "admin"),
        "rita": make_reviewer("rita", "reviewer"),
    }
    for name in ("fay", "fred", "finn"):
        group_member_add(team=team, name="finance", user=people[name])
    return people


def _decide(client, step: Step, action: str, reason: str = "", **kwargs: Any) -> Any:  # type: ignore[no-untyped-def]
    step.refresh_from_db()
    return client.post(
        f"/steps/{step.pk}/decide",
        {
            "action": action,
            "reason": reason,
            "expected_state": step.state,
            "expected_since": step.state_entered_at.isoformat(),
        },
        **kwargs,
    )


def _finance_step(agent, team, ref: str = "run_7/charge_1", approvals: int = 1) -> Step:  # type: ignore[no-untyped-def]
    tool_configure(
        team=team,
        name="charge_card",
        settings={"approver_group": "finance", "required_approvals": approvals},
        actor="test",
    )
    return post_envelope(agent, approval_envelope(operation_ref=ref))


def test_a_step_held_for_finance_is_read_only_for_everyone_else(agent, team, finance) -> None:
    step = _finance_step(agent, team)
    rita = logged_in(finance["rita"])
    page = rita.get(f"/steps/{step.pk}/").content.decode()
    assert "for finance" in page
    assert "Only finance may approve or reject this step" in page
    assert 'value="approve"' not in page and 'value="reject"' not in page

    refused = _decide(rita, step, "approve")
    assert refused.status_code == 403
    step.refresh_from_db()
    assert step.state == "awaiting_approval"

    fay = logged_in(finance["fay"])
    assert 'value="approve"' in fay.get(f"/steps/{step.pk}/").content.decode()
    assert _decide(fay, step, "approve").status_code in (200, 303)
    step.refresh_from_db()
    assert step.state == "retry_ready"


def test_an_admin_outside_the_group_may_cancel_but_not_approve_or_reject(agent, team, finance) -> None:
    step = _finance_step(agent, team)
    ada = logged_in(finance["ada"])
    page = ada.get(f"/steps/{step.pk}/").content.decode()
    assert 'value="cancel"' in page and 'value="approve"' not in page
    assert "as an admin you may still cancel it" in page
    assert _decide(ada, step, "reject", reason="no").status_code == 403
    assert _decide(ada, step, "approve").status_code == 403
    rita = logged_in(finance["rita"])
    assert _decide(rita, step, "cancel", reason="not mine").status_code == 403
    assert _decide(ada, step, "cancel", reason="duplicate request").status_code in (200, 303)
    step.refresh_from_db()
    assert step.state == "cancelled"


def test_a_rule_s_approvers_go_before_the_tool_s_group(agent, team, finance) -> None:
    ReviewerGroup.objects.create(team=team, name="legal")
    step = _finance_step(agent, team)
    Step.objects.filter(pk=step.pk).update(approver_group="legal")
    assert _decide(logged_in(finance["fay"]), step, "approve").status_code == 403


def test_a_quorum_of_three_counts_distinct_finance_reviewers(agent, team, finance) -> None:
    step = _finance_step(agent, team, approvals=3)
    fay, fred, finn = (logged_in(finance[name]) for name in ("fay", "fred", "finn"))
    _decide(fay, step, "approve")
    _decide(fred, step, "approve")
    page = logged_in(finance["rita"]).get(f"/steps/{step.pk}/").content.decode()
    assert "2 of 3, waiting for finance" in page
    queue = logged_in(finance["rita"]).get("/").content.decode()
    assert "2 of 3, waiting for finance" in queue
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    again = _decide(fay, step, "approve", follow=True)  # the same reviewer twice counts once
    assert "already approved" in again.content.decode()
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    _decide(finn, step, "approve")
    step.refresh_from_db()
    assert step.state == "retry_ready"


def test_one_eligible_rejection_rejects_a_quorum(agent, team, finance) -> None:
    step = _finance_step(agent, team, approvals=3)
    _decide(logged_in(finance["fay"]), step, "approve")
    _decide(logged_in(finance["fred"]), step, "reject", reason="wrong amount")
    step.refresh_from_db()
    assert step.state == "cancelled"


def test_an_approval_from_someone_who_left_the_group_no_longer_counts(agent, team, finance) -> None:
    step = _finance_step(agent, team, approvals=2)
    _decide(logged_in(finance["fay"]), step, "approve")
    GroupMembership.objects.filter(user=finance["fay"]).delete()
    _decide(logged_in(finance["fred"]), step, "approve")
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    _decide(logged_in(finance["finn"]), step, "approve")
    step.refresh_from_db()
    assert step.state == "retry_ready"


def test_the_queue_lists_first_what_the_reviewer_may_decide_and_counts_it(agent, team, finance) -> None:
    finance_step = _finance_step(agent, team, ref="run_7/charge_1")
    tool_configure(team=team, name="refund", settings={}, actor="test")
    anyone = post_envelope(agent, approval_envelope(operation_ref="run_8/refund_1", tool="refund"))
    rita_page = logged_in(finance["rita"]).get("/").content.decode()
    fay_page = logged_in(finance["fay"]).get("/").content.decode()
    # rita may decide the refund only: it comes first for her; fay may decide both.
    assert rita_page.index(anyone.operation_ref) < rita_page.index(finance_step.operation_ref)
    assert "read-only" in rita_page
    counts = logged_in(finance["rita"]).get("/queue-counts", **HTMX).content.decode()
    assert 'id="nav-for-you"' in counts
    assert '>For you <span class="count hot">1</span>' in counts
    fay_counts = logged_in(finance["fay"]).get("/queue-counts", **HTMX).content.decode()
    assert '>For you <span class="count hot">2</span>' in fay_counts
    assert "for finance" in fay_page


# --- the groups page -------------------------------------------------------------------------------


def test_team_admins_make_groups_and_put_reviewers_in_them(team, finance) -> None:
    ada = logged_in(finance["ada"])
    made = ada.post(f"/teams/{team.slug}/groups/", {"op": "create", "name": "treasury"}, **htmx_headers("groups"))
    assert made.status_code == 200
    assert "Group treasury made." in made.content.decode()
    assert "<html" not in made.content.decode()  # the section only, for htmx
    added = ada.post(f"/teams/{team.slug}/groups/", {"op": "add", "name": "treasury", "username": "rita"})
    assert "rita is in treasury." in added.content.decode()
    assert ReviewerGroup.objects.get(team=team, name="treasury").members.filter(user=finance["rita"]).exists()
    removed = ada.post(f"/teams/{team.slug}/groups/", {"op": "remove", "name": "treasury", "username": "rita"})
    assert removed.status_code == 200
    assert not GroupMembership.objects.filter(group__name="treasury").exists()
    page = logged_in(finance["rita"]).get(f"/teams/{team.slug}/groups/").content.decode()
    assert "finance" in page and "fay" in page and "Make group" not in page


@pytest.mark.parametrize("name", ["Finance", "9lives", "a" * 41, "fin_ance", "", "fin ance"])
def test_a_group_name_that_breaks_the_pattern_is_refused_naming_the_field(team, finance, name: str) -> None:
    answer = logged_in(finance["ada"]).post(f"/teams/{team.slug}/groups/", {"op": "create", "name": name})
    assert answer.status_code == 400
    assert 'data-field="name"' in answer.content.decode()
    assert not ReviewerGroup.objects.filter(team=team).exclude(name="finance").exists()


def test_only_reviewers_of_the_team_go_in_a_group_and_only_admins_change_groups(team, finance, make_reviewer) -> None:
    make_reviewer("vic", "viewer")
    ada = logged_in(finance["ada"])
    refused = ada.post(f"/teams/{team.slug}/groups/", {"op": "add", "name": "finance", "username": "vic"})
    assert refused.status_code == 400 and 'data-field="user"' in refused.content.decode()
    nobody = ada.post(f"/teams/{team.slug}/groups/", {"op": "add", "name": "finance", "username": "nobody"})
    assert nobody.status_code == 400 and 'data-field="username"' in nobody.content.decode()
    rita = logged_in(finance["rita"])
    assert rita.post(f"/teams/{team.slug}/groups/", {"op": "create", "name": "mine"}).status_code == 403
    assert logged_in(finance["ada"]).get("/teams/other/groups/").status_code == 404


# --- the tool's settings -----------------------------------------------------------------------------


def test_approver_group_naming_a_missing_group_or_a_quorum_above_five_is_refused(team, finance) -> None:
    with pytest.raises(ConfigurationError, match="approver_group names no group"):
        tool_configure(team=team, name="charge_card", settings={"approver_group": "legal"}, actor="test")
    with pytest.raises(ConfigurationError, match="required_approvals must be 1 to 5"):
        tool_configure(team=team, name="charge_card", settings={"required_approvals": 6}, actor="test")
    with pytest.raises(ConfigurationError, match="approver_group must be a group name"):
        tool_configure(team=team, name="charge_card", settings={"approver_group": "Legal!"}, actor="test")
    tool_configure(team=team, name="charge_card", settings={"required_approvals": 5}, actor="test")
    assert Tool.objects.get(team=team, name="charge_card").required_approvals == 5


def test_the_tool_settings_form_names_the_field_it_refuses(team, finance) -> None:
    tool_configure(team=team, name="charge_card", settings={}, actor="test")
    ada = logged_in(finance["ada"])
    base = {
        "team": team.slug,
        "required_approvals": "3",
        "max_attempts": "3",
        "consistency_window_s": "300",
        "verification_deadline_s": "3600",
        "approval_ttl_s": "86400",
        "halt_cooldown_s": "300",
        "safe_detail_keys": "",
    }
    missing = ada.post("/tools/charge_card/settings", {**base, "approver_group": "legal"}, follow=True)
    assert "approver_group names no group" in missing.content.decode()
    six = ada.post("/tools/charge_card/settings", {**base, "required_approvals": "6"}, follow=True)
    assert "required_approvals" in six.content.decode()
    saved = ada.post("/tools/charge_card/settings", {**base, "approver_group": "finance"}, follow=True)
    assert saved.status_code == 200
    tool = Tool.objects.get(team=team, name="charge_card")
    assert (tool.approver_group, tool.required_approvals) == ("finance", 3)
