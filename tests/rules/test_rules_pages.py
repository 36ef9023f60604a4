"""The /rules/ pages without JavaScript: reading, the editor's test-before-save, versions, grants."""

from __future__ import annotations

import re
from typing import Any

import pytest

from accounts.models import Team
from policy.models import Grant, Rule, RuleSetVersion
from rules.services import rule_set_replace
from tests.conftest import logged_in
from tests.rules.conftest import BIG_REFUNDS, NO_PROD_DROPS

pytestmark = pytest.mark.django_db


@pytest.fixture
def ada(make_reviewer: Any) -> Any:
    return logged_in(make_reviewer("ada", "admin"))


@pytest.fixture
def vic(make_reviewer: Any) -> Any:
    return logged_in(make_reviewer("vic", "viewer"))


def saved(team: Team, rules: list[dict]) -> None:
    rule_set_replace(team=team, rules=rules, actor="test", if_version=None, via="test")


def test_a_viewer_reads_the_rules_and_is_offered_no_edit(vic: Any, team: Team) -> None:
    saved(team, [BIG_REFUNDS, {**NO_PROD_DROPS, "mode": "shadow"}])
    page = vic.get("/rules/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "big-refunds" in html and "no-prod-drops" in html and ">shadow<" in html
    assert "Edit the set" not in html and "your team's admins change them" in html
    assert 'id="chart-rule-big-refunds"' in html
    assert vic.get("/rules/edit?team=acme").status_code == 403
    assert (
        vic.post("/rules/edit", {"team": "acme", "rules": "[]", "base_version": 1, "action": "save"}).status_code == 403
    )
    assert RuleSetVersion.objects.filter(team=team).count() == 1


def test_save_needs_a_test_of_that_very_draft(ada: Any, team: Team) -> None:
    text = (
        "rules:\n- name: big-refunds\n  tools: [issue_refund]\n"
        "  when: 'input.amount_cents > 50000'\n  effect: require_approval\n"
    )
    untested = ada.post("/rules/edit", {"team": "acme", "rules": text, "base_version": 0, "action": "save"})
    assert untested.status_code == 200
    assert "Test this draft against history before saving it" in untested.content.decode()
    assert not Rule.objects.filter(team=team).exists()

    tested = ada.post("/rules/edit", {"team": "acme", "rules": text, "base_version": 0, "action": "test"})
    html = tested.content.decode()
    assert 'id="history-outcomes"' in html and "added big-refunds" in html
    digest = re.search(r'name="tested" value="([0-9a-f]{64})"', html).group(1)

    edited = text.replace("50000", "40000")
    refused = ada.post(
        "/rules/edit", {"team": "acme", "rules": edited, "base_version": 0, "action": "save", "tested": digest}
    )
    assert "Test this draft" in refused.content.decode() and not Rule.objects.filter(team=team).exists()

    done = ada.post(
        "/rules/edit", {"team": "acme", "rules": text, "base_version": 0, "action": "save", "tested": digest}
    )
    assert done.status_code == 302 and done["Location"] == "/rules/?team=acme"
    assert list(Rule.objects.filter(team=team).values_list("name", flat=True)) == ["big-refunds"]
    assert RuleSetVersion.objects.get(team=team).made_by == "ada"


def test_the_editor_names_a_broken_rule_and_keeps_the_draft(ada: Any, team: Team) -> None:
    text = "rules:\n- name: bad\n  tools: [x]\n  when: 'input.a =='\n  effect: deny\n"
    page = ada.post("/rules/edit", {"team": "acme", "rules": text, "base_version": 0, "action": "test"})
    assert page.status_code == 422
    html = page.content.decode()
    assert "rule &#x27;bad&#x27;, rules[0].when at position" in html
    assert "input.a ==" in html  # the draft is still in the textarea
    assert 'name="tested"' not in html


def test_approvers_naming_a_missing_group_is_shown_on_the_form(ada: Any, team: Team) -> None:
    text = (
        "rules:\n- name: big\n  tools: [issue_refund]\n  when: 'input.amount_cents > 9'\n"
        "  effect: require_approval\n  approvers: finance\n"
    )
    page = ada.post("/rules/edit", {"team": "acme", "rules": text, "base_version": 0, "action": "test"})
    assert page.status_code == 422
    assert "rules[0].approvers: acme has no group &#x27;finance&#x27;" in page.content.decode()
    assert not Rule.objects.filter(team=team).exists()


def test_one_rule_is_edited_in_place(ada: Any, team: Team) -> None:
    saved(team, [NO_PROD_DROPS, BIG_REFUNDS])
    form = ada.get("/rules/edit?team=acme&rule=big-refunds").content.decode()
    assert "name: big-refunds" in form and "no-prod-drops" not in form.split("<textarea")[1].split("</textarea>")[0]
    text = "name: big-refunds\ntools: [issue_refund]\nwhen: 'input.amount_cents > 90000'\neffect: require_approval\n"
    post = {"team": "acme", "rules": text, "base_version": 1, "rule": "big-refunds"}
    tested = ada.post("/rules/edit", {**post, "action": "test"}).content.decode()
    assert "changed big-refunds" in tested
    digest = re.search(r'name="tested" value="([0-9a-f]{64})"', tested).group(1)
    assert ada.post("/rules/edit", {**post, "action": "save", "tested": digest}).status_code == 302
    assert list(Rule.objects.filter(team=team).values_list("name", "when")) == [
        ("no-prod-drops", NO_PROD_DROPS["when"]),
        ("big-refunds", "input.amount_cents > 90000"),
    ]


def test_a_save_over_a_newer_version_is_refused(ada: Any, team: Team) -> None:
    text = "rules: []\n"
    tested = ada.post(
        "/rules/edit", {"team": "acme", "rules": text, "base_version": 0, "action": "test"}
    ).content.decode()
    digest = re.search(r'name="tested" value="([0-9a-f]{64})"', tested).group(1)
    saved(team, [BIG_REFUNDS])  # someone else saves version 1
    page = ada.post(
        "/rules/edit", {"team": "acme", "rules": text, "base_version": 0, "action": "save", "tested": digest}
    )
    assert page.status_code == 200
    assert "Someone saved version 1" in page.content.decode()
    assert Rule.objects.filter(team=team).count() == 1


def test_versions_are_kept_and_shown(vic: Any, team: Team) -> None:
    saved(team, [BIG_REFUNDS])
    saved(team, [{**BIG_REFUNDS, "approvals": 2}])
    page = vic.get("/rules/").content.decode()
    assert "/rules/version?team=acme&amp;version=1" in page and "/rules/version?team=acme&amp;version=2" in page
    second = vic.get("/rules/version?team=acme&version=2").content.decode()
    assert "changed big-refunds" in second and "approvals: 2" in second
    assert vic.get("/rules/version?team=acme&version=9").status_code == 404
    assert vic.get("/rules/version?team=acme&version=x").status_code == 404


def test_another_teams_pages_are_404(ada: Any, other_team: Team) -> None:
    assert ada.get("/rules/?team=globex").status_code == 404
    assert ada.get("/rules/grants/?team=globex").status_code == 404


def test_an_admin_makes_and_revokes_a_grant_on_the_grants_page(ada: Any, vic: Any, team: Team) -> None:
    made = ada.post(
        "/rules/grants/?team=acme",
        {
            "tool": "issue_refund",
            "when": 'input.customer == "c_1"',
            "scope": "team",
            "expires_in_s": "3600",
            "max_uses": "3",
        },
    )
    assert made.status_code == 302, made.content
    grant = Grant.objects.get(team=team)
    page = vic.get("/rules/grants/").content.decode()
    assert "issue_refund" in page and "0 of 3" in page and "ada" in page and ">live<" in page
    assert "Revoke #" not in page  # a viewer reads only
    assert vic.post(f"/rules/grants/{grant.pk}/revoke", {"team": "acme"}).status_code == 403

    revoked = ada.post(f"/rules/grants/{grant.pk}/revoke", {"team": "acme"})
    assert revoked.status_code == 302
    grant.refresh_from_db()
    assert grant.revoked_at is not None and grant.revoked_by == "ada"


def test_the_revoke_answers_htmx_with_the_row(ada: Any, team: Team) -> None:
    from policy.services import grant_create

    grant = grant_create(team=team, tool="issue_refund", when="true", scope="team", scope_value="", actor="rita")
    response = ada.post(
        f"/rules/grants/{grant.pk}/revoke", {"team": "acme"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"grant-{grant.pk}"
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.strip().startswith(f'<tr id="grant-{grant.pk}">') and ">revoked<" in html


def test_a_refused_grant_is_shown_on_the_form(ada: Any, team: Team) -> None:
    page = ada.post(
        "/rules/grants/?team=acme",
        {"tool": "issue_refund", "when": "input.x ==", "scope": "team", "expires_in_s": "3600", "max_uses": "3"},
    )
    assert page.status_code == 422
    assert "when:" in page.content.decode()
    assert not Grant.objects.exists()


def test_a_user_in_no_team_is_told_so(django_user_model: Any) -> None:
    lone = logged_in(django_user_model.objects.create_user("lone", password="x-unused-pw-1"))
    page = lone.get("/rules/")
    assert page.status_code == 200 and "You are in no team yet" in page.content.decode()
    assert lone.get("/rules/grants/").status_code == 404


def test_the_page_lists_the_latest_steps_a_rule_acted_on(vic: Any, team: Team, agent: Any) -> None:
    from envelopes.proposal import input_fingerprint

    saved(team, [BIG_REFUNDS])
    for number in range(52):  # each held by the rule at the gate, which records the act
        payload = {"amount_cents": 90000 + number}
        response = agent.attempt(
            f"run_4/<b>refund</b>_{number}", tool="issue_refund", fingerprint=input_fingerprint(payload), input=payload
        )
        assert response.status_code == 409 and response.json()["code"] == "approval_required", response.content
    html = vic.get("/rules/").content.decode()
    assert "Latest steps it acted on (50)" in html
    assert "run_4/&lt;b&gt;refund&lt;/b&gt;_51" in html and "<b>refund</b>" not in html  # agent text, escaped
    assert "run_4/&lt;b&gt;refund&lt;/b&gt;_1<" not in html  # the two oldest are past the 50
    assert "held for approval (v1)" in html
