"""Rules and grants at the attempt gate and on holds (contract §11), through the agent API with
a real key and the reviewers' decision service."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785

from accounts.groups import group_create, group_member_add
from approvals.services import DeniedByRule, GrantNotMade, GroupRequired, step_decide
from envelopes.configuration import tool_configure
from envelopes.events import DomainEvent
from envelopes.models import Attempt, AuditEvent, Decision, Step
from policy.models import Grant, RuleAct, RuleTally
from policy.services import grant_create, rules_replace
from tests.conftest import error_envelope

pytestmark = pytest.mark.django_db

BIG = "has(input.amount_cents) && input.amount_cents > 50000"


def fp(value: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def call(agent, ref: str, value: dict[str, Any], **extra: Any):  # type: ignore[no-untyped-def]
    return agent.attempt(ref, tool="refund", fingerprint=fp(value), input=value, **extra)


def rules(team, *items: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    rules_replace(team=team, rules=list(items), actor="admin", if_version=None)


def rule(name: str, effect: str, when: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "tools": ["refund"], "when": when, "effect": effect} | extra


def live_grant(team, when: str = 'input.customer == "c_1"', **extra: Any) -> Grant:  # type: ignore[no-untyped-def]
    fields: dict[str, Any] = {"tool": "refund", "when": when, "scope": "team", "scope_value": "", "actor": "rita"}
    return grant_create(team=team, **(fields | extra))


SMALL = {"customer": "c_1", "amount_cents": 1000}
LARGE = {"customer": "c_1", "amount_cents": 90000}


# --- the gate ----------------------------------------------------------------------------------


def test_an_enforced_deny_refuses_the_call_and_sends_the_step_to_needs_input(agent, team) -> None:
    rules(team, rule("no-big", "deny", BIG))
    answer = call(agent, "r1", LARGE)
    assert answer.status_code == 409, answer.content
    problem = answer.json()
    assert problem["code"] == "denied_by_rule"
    assert problem["rule"] == {"name": "no-big", "version": 1}
    assert problem["directive"] == {
        "action": "fix_input",
        "may_write": False,
        "not_before": None,
        "reason": "denied_by_rule",
    }
    assert (problem["step"]["state"], problem["step"]["reason"]) == ("needs_input", "denied_by_rule")
    assert problem["step"]["policy"]["effect"] == "deny"
    assert problem["step"]["policy"]["rule"] == {"name": "no-big", "version": 1, "when": BIG}
    # The same input is refused again; a changed one is granted.
    assert call(agent, "r1", LARGE).json()["code"] == "denied_by_rule"
    assert call(agent, "r1", SMALL).status_code == 201
    step = Step.objects.get(operation_ref="r1")
    assert RuleAct.objects.filter(step_id=step.pk, outcome="denied_by_rule").count() == 2
    tally = RuleTally.objects.get(rule__name="no-big")
    assert (tally.matched, tally.acted, tally.errors) == (2, 2, 0)
    link = AuditEvent.objects.filter(step=step, kind="refusal").first()
    assert link is not None and link.data["rule"] == {"name": "no-big", "version": 1}


def test_a_require_approval_holds_the_call_with_its_input_as_the_proposal(agent, team, make_reviewer) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    answer = call(agent, "r2", LARGE, run_id="run_9")
    assert answer.status_code == 409, answer.content
    problem = answer.json()
    assert problem["code"] == "approval_required"
    assert problem["rule"] == {"name": "big-refunds", "version": 1}
    assert (problem["step"]["state"], problem["step"]["reason"]) == ("awaiting_approval", "approval_required_by_rule")
    assert problem["step"]["proposal"]["input"] == LARGE
    assert problem["step"]["proposal"]["input_fingerprint"] == fp(LARGE)
    step = Step.objects.get(operation_ref="r2")
    assert step.approvals_required == 1
    # A reviewer approves it: the gate then grants exactly that input, the rule not asked again.
    reviewer = make_reviewer("rita")
    step_decide(team=team, step_id=step.pk, actor=reviewer, action="approve")
    assert call(agent, "r2", {"customer": "c_1", "amount_cents": 90001}).json()["code"] == "approval_mismatch"


def test_an_approved_input_is_granted_though_a_rule_matches_it(agent, team, make_reviewer) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    call(agent, "r3", LARGE)
    step = Step.objects.get(operation_ref="r3")
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve")
    granted = call(agent, "r3", LARGE)
    assert granted.status_code == 201, granted.content
    assert granted.json()["attempt"] == 1


def test_a_rule_asking_for_three_approvals_needs_three_reviewers(agent, team, make_reviewer) -> None:
    group_create(team=team, name="finance")
    rules(team, rule("big-refunds", "require_approval", BIG, approvals=3, approvers="finance"))
    call(agent, "r4", LARGE)
    step = Step.objects.get(operation_ref="r4")
    assert (step.approvals_needed, step.approver_group, step.approvals_required) == (3, "finance", 3)
    rita, sam, tom = (make_reviewer(name) for name in ("rita", "sam", "tom"))
    # The rule's approvers decide (contract §12): outside finance, an approval is refused.
    with pytest.raises(GroupRequired, match="Only finance may decide"):
        step_decide(team=team, step_id=step.pk, actor=rita, action="approve")
    for user in (rita, sam, tom):
        group_member_add(team=team, name="finance", user=user)
    for user in (rita, sam):
        step_decide(team=team, step_id=step.pk, actor=user, action="approve")
        assert Step.objects.get(pk=step.pk).state == "awaiting_approval"
    step_decide(team=team, step_id=step.pk, actor=tom, action="approve")
    assert Step.objects.get(pk=step.pk).state == "retry_ready"


def test_a_live_grant_grants_the_call_and_records_its_use(agent, team) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    grant = live_grant(team)
    answer = call(agent, "r5", LARGE)
    assert answer.status_code == 201, answer.content
    step = answer.json()["step"]
    assert step["policy"]["effect"] == "allow"
    assert step["policy"]["grant"]["id"] == grant.pk
    assert step["policy"]["grant"]["created_by"] == "rita"
    assert step["policy"]["grant"]["uses_left"] == 19
    grant.refresh_from_db()
    assert grant.uses == 1
    attempt = Attempt.objects.get(step__operation_ref="r5")
    assert attempt.grant == {"id": grant.pk, "created_by": "rita"}
    link = AuditEvent.objects.filter(step__operation_ref="r5", kind="transition").last()
    assert link is not None and link.data["grant"] == {"id": grant.pk, "created_by": "rita"}
    assert RuleAct.objects.filter(grant=grant, outcome="granted_by_grant").count() == 1


def test_a_deny_beats_a_live_grant(agent, team) -> None:
    rules(team, rule("no-big", "deny", BIG))
    grant = live_grant(team)
    assert call(agent, "r6", LARGE).json()["code"] == "denied_by_rule"
    grant.refresh_from_db()
    assert grant.uses == 0


def test_a_grant_is_used_at_most_max_uses_times(agent, team) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    live_grant(team, max_uses=2)
    codes = [call(agent, f"r7-{n}", LARGE).status_code for n in range(3)]
    assert codes == [201, 201, 409]


def test_a_grant_of_another_run_does_not_cover_the_call(agent, team) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    live_grant(team, scope="run", scope_value="run_1")
    assert call(agent, "r8", LARGE, run_id="run_2").json()["code"] == "approval_required"
    assert call(agent, "r9", LARGE, run_id="run_1").status_code == 201


def test_a_shadow_rule_only_counts(agent, team) -> None:
    rules(team, rule("would-deny", "deny", BIG, mode="shadow"))
    assert call(agent, "r10", LARGE).status_code == 201
    tally = RuleTally.objects.get(rule__name="would-deny")
    assert (tally.matched, tally.would_match, tally.acted) == (0, 1, 0)


def test_a_deny_that_fails_on_the_call_fails_closed_and_is_counted(agent, team) -> None:
    rules(team, rule("no-big", "deny", "input.amount_cents > 50000"))
    answer = call(agent, "r11", {"customer": "c_1"})
    assert answer.json()["code"] == "denied_by_rule"
    assert RuleTally.objects.get(rule__name="no-big").errors == 1


def test_a_call_without_input_is_denied_by_a_rule_reading_its_input(agent, team) -> None:
    rules(team, rule("no-big", "deny", "input.amount_cents > 50000"))
    answer = agent.attempt("r12", tool="refund", fingerprint=fp(LARGE))
    assert answer.json()["code"] == "denied_by_rule"


def test_rules_of_other_tools_and_teams_do_not_act(agent, team, other_team) -> None:
    rules(team, rule("mail-only", "deny", "true", tools=["send_email"]))
    rules(other_team, rule("everything", "deny", "true", tools=["*"]))
    assert call(agent, "r13", LARGE).status_code == 201


def test_the_key_variable_is_the_calling_keys_name(agent, team) -> None:
    rules(team, rule("agent-key", "deny", 'key == "agent" && attempt == 1'))
    assert call(agent, "r14", SMALL).json()["code"] == "denied_by_rule"


# --- holds for another reason -------------------------------------------------------------------


def ask_approval(agent, ref: str, value: dict[str, Any]):  # type: ignore[no-untyped-def]
    assert call(agent, ref, value).status_code == 201
    return agent.envelope(
        error_envelope(tool="refund", operation_ref=ref, next_action="request_approval", code="NEEDS_APPROVAL")
    )


def test_a_live_grant_approves_a_requested_approval_at_once(agent, team) -> None:
    grant = live_grant(team)
    answer = ask_approval(agent, "h1", SMALL)
    assert answer.status_code == 201, answer.content
    step = answer.json()["step"]
    assert (step["state"], step["reason"]) == ("retry_ready", "approved_by_grant")
    (decision,) = step["decisions"]
    assert decision["decided_by"] == {"kind": "grant", "reviewer": None, "rule": None, "grant": {"id": grant.pk}}
    assert decision["reviewer"] == f"grant:{grant.pk}"
    row = Decision.objects.get(step__operation_ref="h1")
    assert row.reviewer is None and row.decided_by == f"grant:{grant.pk}"
    assert DomainEvent.objects.filter(step_id=row.step_id, type="step.decided").count() == 1
    grant.refresh_from_db()
    assert grant.uses == 2  # the first attempt took one too: §11's gate uses a live grant that matches
    # The approved input is granted.
    assert call(agent, "h1", SMALL).status_code == 201


def test_an_enforced_allow_approves_a_one_approval_hold(agent, team) -> None:
    rules(team, rule("small-ok", "allow", "input.amount_cents < 5000"))
    step = ask_approval(agent, "h2", SMALL).json()["step"]
    assert (step["state"], step["reason"]) == ("retry_ready", "approved_by_rule")
    assert step["decisions"][0]["decided_by"]["rule"] == {"name": "small-ok", "version": 1}


def test_nothing_but_reviewers_releases_a_two_approval_hold(agent, team) -> None:
    tool_configure(team=team, name="refund", settings={"required_approvals": 2}, actor="admin")
    rules(team, rule("small-ok", "allow", "true"))
    live_grant(team)
    step = ask_approval(agent, "h3", SMALL).json()["step"]
    assert step["state"] == "awaiting_approval"
    assert step["decisions"] == []


def test_a_deny_of_the_input_under_review_sends_it_back_to_the_agent(agent, team) -> None:
    rules(team, rule("no-c1", "deny", 'input.customer == "c_1"', mode="shadow"))
    assert call(agent, "h4", SMALL).status_code == 201  # shadow: counted only
    rules(team, rule("no-c1", "deny", 'input.customer == "c_1"'))
    answer = agent.envelope(
        error_envelope(tool="refund", operation_ref="h4", next_action="request_approval", code="NEEDS_APPROVAL")
    )
    step = answer.json()["step"]
    assert (step["state"], step["reason"]) == ("needs_input", "denied_by_rule")
    assert step["policy"]["rule"]["name"] == "no-c1"


def test_an_input_sent_back_to_review_is_granted_at_once_by_a_grant(agent, team, make_reviewer) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    call(agent, "h5", LARGE)
    step = Step.objects.get(operation_ref="h5")
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve")
    live_grant(team, when="input.amount_cents == 1000")
    answer = call(agent, "h5", SMALL)  # another input than the approved one: mismatch, then the grant
    assert answer.status_code == 201, answer.content
    assert answer.json()["step"]["decisions"][-1]["decided_by"]["kind"] == "grant"


# --- reviewers -----------------------------------------------------------------------------------


def test_a_reviewer_cannot_approve_an_input_a_deny_matches(agent, team, make_reviewer) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    call(agent, "v1", LARGE)
    rules(team, rule("big-refunds", "require_approval", BIG), rule("no-big", "deny", "input.amount_cents > 80000"))
    step = Step.objects.get(operation_ref="v1")
    with pytest.raises(DeniedByRule) as refused:
        step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve")
    assert refused.value.code == "denied_by_rule"
    assert refused.value.rule == {"name": "no-big", "version": 1}
    assert Step.objects.get(pk=step.pk).state == "awaiting_approval"
    # An edit the deny does not match is approved.
    result = step_decide(
        team=team,
        step_id=step.pk,
        actor=make_reviewer("sam"),
        action="approve",
        edited_input={"customer": "c_1", "amount_cents": 70000},
    )
    assert result.transitioned


def test_an_approval_with_a_grant_allows_similar_calls(agent, team, make_reviewer) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    call(agent, "g1", LARGE, run_id="run_5")
    step = Step.objects.get(operation_ref="g1")
    step_decide(
        team=team,
        step_id=step.pk,
        actor=make_reviewer("rita"),
        action="approve",
        grant={"when": 'input.customer == "c_1"', "scope": "run", "expires_in_s": 3600, "max_uses": 2},
    )
    grant = Grant.objects.get(team=team)
    assert (grant.scope, grant.scope_value, grant.created_by, grant.from_step_id) == ("run", "run_5", "rita", step.pk)
    assert call(agent, "g2", LARGE | {"amount_cents": 60000}, run_id="run_5").status_code == 201
    assert call(agent, "g3", LARGE | {"amount_cents": 70000}, run_id="run_5").status_code == 201
    assert call(agent, "g4", LARGE, run_id="run_5").json()["code"] == "approval_required"


def test_the_prefilled_grant_pins_the_approved_input(agent, team, make_reviewer) -> None:
    rules(team, rule("big-refunds", "require_approval", BIG))
    call(agent, "g5", LARGE)
    step = Step.objects.get(operation_ref="g5")
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve", grant={"scope": "team"})
    assert Grant.objects.get(team=team).when == 'input.amount_cents == 90000 && input.customer == "c_1"'


def test_a_grant_is_refused_on_a_two_approval_tool_and_nothing_is_decided(agent, team, make_reviewer) -> None:
    tool_configure(team=team, name="refund", settings={"required_approvals": 2}, actor="admin")
    rules(team, rule("big-refunds", "require_approval", BIG))
    call(agent, "g6", LARGE)
    step = Step.objects.get(operation_ref="g6")
    with pytest.raises(GrantNotMade) as refused:
        step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve", grant={"scope": "team"})
    assert (refused.value.field, refused.value.rule) == ("grant.grant", "four_eyes")
    assert not Decision.objects.filter(step=step).exists()
    assert not Grant.objects.exists()


def test_a_permitted_retry_sent_back_to_review_meets_the_rules(agent, team, make_reviewer) -> None:
    assert ask_approval(agent, "p1", SMALL).json()["step"]["state"] == "awaiting_approval"
    bad = error_envelope(tool="refund", operation_ref="p1", category="not-a-category", code="NEEDS_APPROVAL")
    assert agent.envelope(bad).status_code == 422
    step = Step.objects.get(operation_ref="p1")
    assert (step.state, step.reason) == ("escalated", "malformed_envelope")
    rules(team, rule("no-c1", "deny", 'input.customer == "c_1"'))
    step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="permit_retry", reason="looked")
    step.refresh_from_db()
    assert (step.state, step.reason) == ("needs_input", "denied_by_rule")
