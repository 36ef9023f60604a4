"""policy.services: a rule set replaced whole or not at all; grants made within their limits,
used at most max_uses times, revoked at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from policy.errors import GrantNotFound, GrantRefused, RulesInvalid, VersionMismatch
from policy.models import Grant, Rule, RuleSetVersion
from policy.services import (
    grant_create,
    grant_revoke,
    grant_use,
    rule_set_current,
    rules_replace,
    rules_validate,
)

pytestmark = pytest.mark.django_db


def a_rule(name: str = "big-refunds", **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "tools": ["refund"],
        "when": "has(input.amount_cents) && input.amount_cents > 50000",
        "effect": "require_approval",
    } | extra


def test_a_first_set_is_version_1_with_defaults(team) -> None:
    saved = rules_replace(team=team, rules=[a_rule()], actor="rita", if_version=0)
    assert saved.version == 1
    (rule,) = Rule.objects.filter(team=team)
    assert (rule.version, rule.mode, rule.enabled, rule.approvals, rule.approvers) == (1, "enforce", True, 1, "")
    assert rule.updated_by == "rita"
    assert saved.rules[0]["name"] == "big-refunds"
    assert saved.rules[0]["approvers"] is None


def test_a_changed_rule_gets_a_new_version_and_an_unchanged_one_keeps_its_own(team) -> None:
    rules_replace(
        team=team, rules=[a_rule(), a_rule("no-drop", effect="deny", when="true")], actor="rita", if_version=None
    )
    rules_replace(
        team=team,
        rules=[a_rule(mode="shadow"), a_rule("no-drop", effect="deny", when="true")],
        actor="sam",
        if_version=1,
    )
    versions = dict(Rule.objects.filter(team=team).values_list("name", "version"))
    assert versions == {"big-refunds": 2, "no-drop": 1}
    assert Rule.objects.get(team=team, name="no-drop").updated_by == "rita"
    assert list(RuleSetVersion.objects.filter(team=team).values_list("version", flat=True)) == [2, 1]


def test_a_rule_left_out_is_deleted_and_old_versions_are_kept(team) -> None:
    rules_replace(team=team, rules=[a_rule(), a_rule("other", when="true", effect="deny")], actor="rita", if_version=0)
    rules_replace(team=team, rules=[a_rule("other", when="true", effect="deny")], actor="rita", if_version=1)
    assert list(Rule.objects.filter(team=team).values_list("name", flat=True)) == ["other"]
    first = RuleSetVersion.objects.get(team=team, version=1)
    assert [r["name"] for r in first.rules] == ["big-refunds", "other"]


def test_the_set_keeps_its_order(team) -> None:
    rules_replace(team=team, rules=[a_rule("b"), a_rule("a")], actor="rita", if_version=0)
    assert [r.name for r in rule_set_current(team)[1]] == ["b", "a"]
    rules_replace(team=team, rules=[a_rule("a"), a_rule("b")], actor="rita", if_version=1)
    version, rules = rule_set_current(team)
    assert (version, [r.name for r in rules], [r.version for r in rules]) == (2, ["a", "b"], [1, 1])


def test_a_stale_version_is_refused_and_changes_nothing(team) -> None:
    rules_replace(team=team, rules=[a_rule()], actor="rita", if_version=0)
    with pytest.raises(VersionMismatch) as refused:
        rules_replace(team=team, rules=[], actor="sam", if_version=0)
    assert refused.value.current == 1
    assert Rule.objects.filter(team=team).count() == 1


def test_a_rule_that_does_not_compile_is_refused_naming_the_rule_field_and_position(team) -> None:
    rules_replace(team=team, rules=[a_rule("kept")], actor="rita", if_version=0)
    bad = [a_rule("kept", mode="shadow"), a_rule("fine"), a_rule("broken", when="input.amount_cents > ")]
    with pytest.raises(RulesInvalid) as refused:
        rules_replace(team=team, rules=bad, actor="rita", if_version=1)
    (problem,) = refused.value.problems
    assert problem["field"] == "rules[2].when"
    assert problem["rule"] == "broken"
    assert isinstance(problem["position"], int)
    assert problem["reason"]
    # Nothing half-applied: the first rule's change and the second rule are not saved.
    assert list(Rule.objects.filter(team=team).values_list("name", "mode")) == [("kept", "enforce")]
    assert RuleSetVersion.objects.filter(team=team).count() == 1


def test_an_unknown_variable_is_a_problem_of_its_rule(team) -> None:
    (problem,) = rules_validate([a_rule(when="amount > 5")])
    assert (problem["field"], problem["position"]) == ("rules[0].when", 0)
    assert "amount" in problem["reason"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Big Refunds"}, "rules[0].name"),
        ({"tools": []}, "rules[0].tools"),
        ({"tools": ["*", "refund"]}, "rules[0].tools"),
        ({"tools": "refund"}, "rules[0].tools"),
        ({"effect": "maybe"}, "rules[0].effect"),
        ({"approvals": 6}, "rules[0].approvals"),
        ({"approvals": True}, "rules[0].approvals"),
        ({"effect": "deny", "approvals": 2}, "rules[0].approvals"),
        ({"approvers": "Finance Team"}, "rules[0].approvers"),
        ({"effect": "allow", "approvers": "finance"}, "rules[0].approvers"),
        ({"mode": "dry"}, "rules[0].mode"),
        ({"enabled": "yes"}, "rules[0].enabled"),
        ({"when": 5}, "rules[0].when"),
        ({"colour": "red"}, "rules[0].colour"),
    ],
)
def test_each_bad_field_is_named(change: dict[str, object], field: str) -> None:
    problems = rules_validate([a_rule(**change)])
    assert [p["field"] for p in problems] == [field]


def test_approvers_must_name_a_group_of_the_team(team, other_team) -> None:
    from accounts.groups import group_create

    group_create(team=other_team, name="finance")  # another team's group does not count
    with pytest.raises(RulesInvalid) as refused:
        rules_replace(team=team, rules=[a_rule(approvers="finance")], actor="rita", if_version=0)
    assert [p["field"] for p in refused.value.problems] == ["rules[0].approvers"]
    assert [p["field"] for p in rules_validate([a_rule(approvers="finance")], team=team)] == ["rules[0].approvers"]
    group_create(team=team, name="finance")
    assert rules_validate([a_rule(approvers="finance")], team=team) == []
    assert rules_replace(team=team, rules=[a_rule(approvers="finance")], actor="rita", if_version=0).version == 1


def test_an_exported_rule_applies_as_it_is(team) -> None:
    saved = rules_replace(team=team, rules=[a_rule()], actor="rita", if_version=0)
    assert rules_validate(saved.rules) == []


def test_two_rules_of_one_name_are_refused() -> None:
    problems = rules_validate([a_rule(), a_rule()])
    assert [p["field"] for p in problems] == ["rules[1].name"]


def test_a_set_over_200_rules_is_refused_naming_the_limit() -> None:
    problems = rules_validate([a_rule(f"r{n}") for n in range(201)])
    assert problems[0]["field"] == "rules"
    assert "200" in problems[0]["reason"]
    assert rules_validate([a_rule(f"r{n}") for n in range(200)]) == []


def make_grant(team, **extra):  # type: ignore[no-untyped-def]
    fields = {
        "team": team,
        "tool": "refund",
        "when": 'input.customer == "c_1"',
        "scope": "team",
        "scope_value": "",
        "actor": "rita",
    }
    return grant_create(**(fields | extra))


def test_a_grant_has_its_defaults(team) -> None:
    grant = make_grant(team, from_step_id=12)
    assert (grant.max_uses, grant.uses, grant.created_by, grant.from_step_id) == (20, 0, "rita", 12)
    assert timedelta(minutes=59) < grant.expires_at - timezone.now() <= timedelta(hours=1)


@pytest.mark.parametrize(
    ("extra", "field", "rule"),
    [
        ({"expires_in_s": 7 * 24 * 3600 + 1}, "expires_in_s", "range"),
        ({"expires_in_s": 0}, "expires_in_s", "range"),
        ({"max_uses": 0}, "max_uses", "range"),
        ({"max_uses": 1001}, "max_uses", "range"),
        ({"when": "input.customer =="}, "when", "cel"),
        ({"required_approvals": 2}, "grant", "four_eyes"),
        ({"scope": "run", "scope_value": ""}, "scope", "scope_value"),
        ({"scope": "everyone"}, "scope", "choice"),
    ],
)
def test_a_grant_past_its_limits_is_refused(team, extra: dict[str, object], field: str, rule: str) -> None:
    with pytest.raises(GrantRefused) as refused:
        make_grant(team, **extra)
    assert (refused.value.field, refused.value.rule) == (field, rule)
    assert not Grant.objects.exists()


def test_the_limits_themselves_are_allowed(team) -> None:
    grant = make_grant(team, expires_in_s=7 * 24 * 3600, max_uses=1000, scope="key", scope_value="3")
    assert (grant.max_uses, grant.scope_value) == (1000, "3")


def test_a_grant_is_used_at_most_max_uses_times(team) -> None:
    grant = make_grant(team, max_uses=2)
    now = timezone.now()
    assert [grant_use(grant_id=grant.pk, now=now) for _ in range(3)] == [True, True, False]
    grant.refresh_from_db()
    assert grant.uses == 2


def test_a_revoked_or_expired_grant_is_not_used(team) -> None:
    grant = make_grant(team)
    assert grant_use(grant_id=grant.pk, now=grant.expires_at) is False
    revoked = grant_revoke(team=team, grant_id=grant.pk, actor="sam")
    assert revoked.revoked_by == "sam"
    assert grant_use(grant_id=grant.pk, now=timezone.now()) is False


def test_revoking_twice_keeps_the_first_revocation(team) -> None:
    grant = make_grant(team)
    first = grant_revoke(team=team, grant_id=grant.pk, actor="sam").revoked_at
    again = grant_revoke(team=team, grant_id=grant.pk, actor="tom")
    assert (again.revoked_at, again.revoked_by) == (first, "sam")


def test_another_teams_grant_is_not_found(team, other_team) -> None:
    grant = make_grant(team)
    with pytest.raises(GrantNotFound):
        grant_revoke(team=other_team, grant_id=grant.pk, actor="sam")
    assert Grant.objects.get(pk=grant.pk).revoked_at is None
