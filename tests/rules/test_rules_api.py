"""The rules API (contract §11) through its door: reviewer tokens, the team in the path, If-Match."""

from __future__ import annotations

import json
from typing import Any

import pytest

from accounts.models import Team
from envelopes.models import AuditEvent
from policy.models import Rule, RuleSetVersion
from tests.conftest import AgentClient
from tests.rules.conftest import BIG_REFUNDS, NO_PROD_DROPS, RulesClient

pytestmark = pytest.mark.django_db


def test_a_team_without_rules_reads_version_0(viewer_api: RulesClient) -> None:
    response = viewer_api.rules()
    assert response.status_code == 200
    assert response.json() == {"version": 0, "rules": []}
    assert response["ETag"].startswith('"rules.')


def test_an_admin_replaces_the_set_and_reads_it_back(admin_api: RulesClient) -> None:
    response = admin_api.replace([NO_PROD_DROPS, BIG_REFUNDS])

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["version"] == 1
    assert [rule["name"] for rule in body["rules"]] == ["no-prod-drops", "big-refunds"]
    refunds = body["rules"][1]
    assert refunds["approvals"] == 1 and refunds["approvers"] is None and refunds["mode"] == "enforce"
    assert refunds["version"] == 1 and refunds["updated_by"] == "ada"
    assert response["ETag"] != '"rules.0"' and response["ETag"] == admin_api.etag()


def test_if_none_match_answers_304_while_the_set_is_unchanged(admin_api: RulesClient) -> None:
    etag = admin_api.etag()
    assert admin_api.rules(HTTP_IF_NONE_MATCH=etag).status_code == 304
    admin_api.replace([BIG_REFUNDS])
    assert admin_api.rules(HTTP_IF_NONE_MATCH=etag).status_code == 200


def test_a_pulled_set_pushes_back_unchanged(admin_api: RulesClient) -> None:
    pulled = admin_api.replace([BIG_REFUNDS]).json()
    again = admin_api.put(pulled, etag=admin_api.etag())
    assert again.status_code == 200, again.content
    assert again.json()["rules"][0]["version"] == 1  # nothing changed in the rule


def test_a_change_bumps_the_rule_version_and_keeps_old_set_versions(admin_api: RulesClient, team: Team) -> None:
    admin_api.replace([BIG_REFUNDS])
    changed = admin_api.replace([{**BIG_REFUNDS, "approvals": 2}]).json()
    assert changed["version"] == 2 and changed["rules"][0]["version"] == 2
    assert list(RuleSetVersion.objects.filter(team=team).order_by("version").values_list("version", flat=True)) == [
        1,
        2,
    ]


def test_every_change_is_a_link_of_the_teams_policy_chain(admin_api: RulesClient, team: Team) -> None:
    admin_api.replace([BIG_REFUNDS])
    admin_api.replace([NO_PROD_DROPS])
    links = list(AuditEvent.objects.filter(chain=f"policy:{team.pk}").order_by("seq"))
    assert [link.seq for link in links] == [1, 2]
    assert links[1].prev_hash == links[0].hash
    assert links[0].kind == "policy" and links[0].actor == "ada" and links[0].reason == "rules_replaced"
    assert links[1].data["added"] == ["no-prod-drops"] and links[1].data["removed"] == ["big-refunds"]
    assert links[1].data["version"] == 2 and links[1].tool_id is None


def test_the_audit_verifier_accepts_the_policy_chain(admin_api: RulesClient) -> None:
    from envelopes.audit import audit_verify

    admin_api.replace([BIG_REFUNDS])
    admin_api.replace([])
    assert [str(problem) for problem in audit_verify()] == []


def test_a_rule_that_does_not_compile_is_refused_naming_its_field_and_position(
    admin_api: RulesClient, team: Team
) -> None:
    admin_api.replace([BIG_REFUNDS])
    broken = {**NO_PROD_DROPS, "when": "input.env == "}

    response = admin_api.put({"rules": [BIG_REFUNDS, broken]}, etag=admin_api.etag())

    assert response.status_code == 422
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "rules_invalid"
    (error,) = problem["errors"]
    assert error["field"] == "rules[1].when" and error["name"] == "no-prod-drops" and error["rule"] == "cel"
    assert isinstance(error["position"], int) and error["reason"]
    # Nothing half-applied: the set is still version 1 with its one rule, and nothing was audited.
    assert list(Rule.objects.filter(team=team).values_list("name", flat=True)) == ["big-refunds"]
    assert AuditEvent.objects.filter(chain=f"policy:{team.pk}").count() == 1


def test_approvers_naming_a_group_the_team_has_not_made_is_refused(admin_api: RulesClient, team: Team) -> None:
    from accounts.groups import group_create

    group_create(team=team, name="finance")
    held = {**BIG_REFUNDS, "approvers": "finance"}
    legal = {**NO_PROD_DROPS, "effect": "require_approval", "approvers": "legal"}
    response = admin_api.put({"rules": [held, legal]}, etag=admin_api.etag())

    assert response.status_code == 422
    (error,) = response.json()["errors"]
    assert error["field"] == "rules[1].approvers" and "no group 'legal'" in error["reason"]
    assert not Rule.objects.filter(team=team).exists()
    # The test against history refuses it too; a group that exists is accepted.
    tested = admin_api.test({"rules": [{**held, "approvers": "legal"}]})
    assert tested.status_code == 422 and tested.json()["errors"][0]["field"] == "rules[0].approvers"
    assert admin_api.put({"rules": [held]}, etag=admin_api.etag()).status_code == 200


def test_an_unknown_variable_and_a_non_bool_are_refused(admin_api: RulesClient) -> None:
    response = admin_api.put(
        {"rules": [{**BIG_REFUNDS, "when": "amount > 5"}, {**NO_PROD_DROPS, "when": "input.env"}]},
        etag=admin_api.etag(),
    )
    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == ["rules[0].when", "rules[1].when"]


def test_more_than_200_rules_are_refused_naming_the_limit(admin_api: RulesClient) -> None:
    rules = [{**NO_PROD_DROPS, "name": f"rule-{n}"} for n in range(201)]
    response = admin_api.put({"rules": rules}, etag=admin_api.etag())
    assert response.status_code == 422
    assert any("200" in error["reason"] and error["field"] == "rules" for error in response.json()["errors"])


def test_an_expression_over_2_kib_is_refused_naming_the_limit(admin_api: RulesClient) -> None:
    long = " || ".join(f'input.env == "e{n:04}"' for n in range(140))
    assert len(long) > 2048
    response = admin_api.put({"rules": [{**NO_PROD_DROPS, "when": long}]}, etag=admin_api.etag())
    assert response.status_code == 422
    (error,) = response.json()["errors"]
    assert error["field"] == "rules[0].when" and "2 KiB" in error["reason"]


def test_a_stale_if_match_is_412_with_the_current_etag(admin_api: RulesClient) -> None:
    stale = admin_api.etag()
    admin_api.replace([BIG_REFUNDS])
    response = admin_api.put({"rules": [NO_PROD_DROPS]}, etag=stale)
    assert response.status_code == 412
    assert response.json()["code"] == "rules_changed"
    assert response["ETag"] == admin_api.etag()
    assert admin_api.rules().json()["rules"][0]["name"] == "big-refunds"


@pytest.mark.parametrize("if_match", [None, "*", "  "])
def test_a_missing_if_match_is_428(admin_api: RulesClient, if_match: str | None) -> None:
    response = admin_api.put({"rules": [BIG_REFUNDS]}, etag=if_match)
    assert response.status_code == 428
    assert response.json()["code"] == "precondition_required"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ("{", 400),
        ('{"rules": [], "rules": [1]}', 400),  # a key twice
        ("[]", 422),
        ({"rules": "all of them"}, 422),
        ({"rules": [], "extra": 1}, 422),
        ({"rules": [{**BIG_REFUNDS, "effect": "maybe"}]}, 422),
        ({"rules": [{**BIG_REFUNDS, "colour": "red"}]}, 422),
        ({"rules": [BIG_REFUNDS, BIG_REFUNDS]}, 422),
    ],
)
def test_a_bad_body_is_refused_and_nothing_changes(admin_api: RulesClient, team: Team, body: Any, status: int) -> None:
    response = admin_api.put(body, etag=admin_api.etag())
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert not RuleSetVersion.objects.filter(team=team).exists()


def test_a_body_over_a_mebibyte_is_413(admin_api: RulesClient) -> None:
    body = json.dumps({"rules": [{**BIG_REFUNDS, "description": "x" * (1024 * 1024)}]})
    assert admin_api.put(body, etag=admin_api.etag()).status_code == 413


@pytest.mark.parametrize("role", ["viewer", "reviewer"])
def test_only_admins_change_the_set(member_api: Any, role: str, team: Team) -> None:
    api = member_api("mo", role)
    assert api.rules().status_code == 200
    response = api.put({"rules": [BIG_REFUNDS]}, etag=api.etag())
    assert response.status_code == 403
    assert response.json()["code"] == "role_required"
    assert not Rule.objects.filter(team=team).exists()


def test_another_teams_rules_are_404(admin_api: RulesClient, other_team: Team) -> None:
    other = RulesClient(admin_api.raw, team=other_team.slug)
    assert other.rules().status_code == 404
    assert other.put({"rules": [BIG_REFUNDS]}, etag='"rules.1.0"').status_code == 404
    assert other.test({"rules": [BIG_REFUNDS]}).status_code == 404
    assert RulesClient(admin_api.raw, team="no-such-team").rules().status_code == 404


def test_an_agent_key_is_403_everywhere(agent: AgentClient) -> None:
    api = RulesClient(agent.raw_key)
    for response in (
        api.rules(),
        api.put({"rules": [BIG_REFUNDS]}, etag='"rules.1.0"'),
        api.test({"rules": []}),
        api.grants(),
        api.grant({"tool": "issue_refund", "when": "true", "scope": "team"}),
        api.revoke(1),
    ):
        assert response.status_code == 403, response.content
        assert response.json()["code"] == "reviewer_token_required"


def test_no_or_a_bad_token_is_401() -> None:
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/teams/acme/rules").status_code == 401
    for path in ("rules", "grants"):
        assert RulesClient("hpr_not-a-token").http.get(f"/api/v1/teams/acme/{path}").status_code == 401


def test_wrong_methods_are_405(admin_api: RulesClient) -> None:
    assert admin_api.http.post(admin_api.path(), {}, format="json").status_code == 405
    assert admin_api.http.delete(admin_api.path()).status_code == 405
    assert admin_api.http.get(admin_api.path("rules/test")).status_code == 405
    assert admin_api.http.put(admin_api.path("grants"), {}, format="json").status_code == 405
    assert admin_api.http.get(admin_api.path("grants/1")).status_code == 405


def test_the_openapi_document_describes_every_rules_endpoint(openapi_document: dict[str, Any]) -> None:
    paths = openapi_document["paths"]
    assert set(paths["/api/v1/teams/{team}/rules"]) >= {"get", "put"}
    assert "post" in paths["/api/v1/teams/{team}/rules/test"]
    assert set(paths["/api/v1/teams/{team}/grants"]) >= {"get", "post"}
    assert "delete" in paths["/api/v1/teams/{team}/grants/{id}"]
    put = paths["/api/v1/teams/{team}/rules"]["put"]
    assert {"412", "422", "428"} <= set(put["responses"])
