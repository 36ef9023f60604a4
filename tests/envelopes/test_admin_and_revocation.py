"""Revoking an API key (command and admin) and the admin of teams, keys and tool settings."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.models import ApiKey, Team
from accounts.services import api_key_create
from envelopes.admin import ToolAdminForm
from envelopes.models import AuditEvent, Tool
from tests.conftest import AgentClient, error_envelope

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_revoked_key_answers_401_on_its_next_request(team: Team) -> None:
    created = api_key_create(team=team, name="ci")
    agent = AgentClient(created.raw)
    assert agent.envelope(error_envelope()).status_code == 201

    output = run("revokeapikey", "--team", team.slug, "--prefix", created.api_key.prefix)
    assert f"Revoked API key {created.api_key.prefix}…" in output

    refused = agent.envelope(error_envelope(operation_ref="run_81/step_5"))
    assert refused.status_code == 401
    assert refused["Content-Type"].startswith("application/problem+json")
    assert "already revoked" in run("revokeapikey", "--team", team.slug, "--prefix", created.api_key.prefix + "…")


def test_revokeapikey_names_what_it_cannot_find(team: Team, other_team: Team) -> None:
    theirs = api_key_create(team=other_team, name="theirs")
    with pytest.raises(CommandError, match="has no API key"):
        run("revokeapikey", "--team", team.slug, "--prefix", theirs.api_key.prefix)
    with pytest.raises(CommandError, match="No team"):
        run("revokeapikey", "--team", "nope", "--prefix", theirs.api_key.prefix)
    with pytest.raises(CommandError, match="8 characters"):
        run("revokeapikey", "--team", team.slug, "--prefix", "hp_")
    assert AgentClient(theirs.raw).get("/api/v1/steps").status_code == 200


def test_the_admin_revokes_keys_and_never_shows_their_hash(admin_client: Client, team: Team) -> None:
    created = api_key_create(team=team, name="ci")
    key = created.api_key
    page = admin_client.get(f"/admin/accounts/apikey/{key.pk}/change/").content.decode()
    assert key.prefix in page
    assert key.key_hash not in page and created.raw not in page
    assert admin_client.get("/admin/accounts/apikey/add/").status_code == 403

    response = admin_client.post(
        "/admin/accounts/apikey/", {"action": "revoke", "_selected_action": [str(key.pk)]}, follow=True
    )
    assert "Revoked 1 API key(s)" in response.content.decode()
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert AgentClient(created.raw).get("/api/v1/steps").status_code == 401


def _tool_form(tool: Tool, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "side_effects": "on" if tool.side_effects else "",
        "required_approvals": tool.required_approvals,
        "max_attempts": tool.max_attempts,
        "consistency_window_s": tool.consistency_window_s,
        "verification_deadline_s": tool.verification_deadline_s,
        "approval_ttl_s": tool.approval_ttl_s,
        "halt_cooldown_s": tool.halt_cooldown_s,
        "safe_detail_keys": '["field"]',
        "strict_codes": "on" if tool.strict_codes else "",
    }
    data.update(changes)
    return {name: value for name, value in data.items() if value != ""}


def test_the_tool_admin_refuses_settings_that_break_a_rule(admin_client: Client, team: Team) -> None:
    tool = Tool.objects.create(team=team, name="send_email")
    url = f"/admin/envelopes/tool/{tool.pk}/change/"
    response = admin_client.post(url, _tool_form(tool, verification_deadline_s=10, consistency_window_s=300))
    assert response.status_code == 200
    assert "verification_deadline_s must not be below consistency_window_s" in response.content.decode()
    response = admin_client.post(url, _tool_form(tool, safe_detail_keys='["not an identifier"]'))
    assert "safe_detail_keys must be a list of identifiers" in response.content.decode()
    assert Tool.objects.get(pk=tool.pk).safe_detail_keys == []


def test_saving_a_tool_in_the_admin_keeps_its_circuit_and_audit_head(
    admin_client: Client, team: Team, monkeypatch
) -> None:
    tool = Tool.objects.create(team=team, name="send_email")
    validate = ToolAdminForm.clean

    def clean_while_the_app_writes(form: ToolAdminForm) -> dict:
        # Between the admin loading the row and saving it, the app halts the tool and appends
        # to its audit chain.
        Tool.objects.filter(pk=tool.pk).update(halted_reason="SMTP_DOWN", audit_seq=1, audit_head="a" * 64)
        return validate(form)

    monkeypatch.setattr(ToolAdminForm, "clean", clean_while_the_app_writes)
    response = admin_client.post(
        f"/admin/envelopes/tool/{tool.pk}/change/", _tool_form(tool, max_attempts=5, strict_codes="on")
    )
    assert response.status_code == 302
    saved = Tool.objects.get(pk=tool.pk)
    assert (saved.max_attempts, saved.strict_codes, saved.safe_detail_keys) == (5, True, ["field"])
    assert saved.halted_reason == "SMTP_DOWN"
    # The change is the next link of the chain the app had moved on meanwhile, naming who made it.
    link = AuditEvent.objects.get(chain=f"tool:{tool.pk}", kind=AuditEvent.Kind.SETTINGS)
    assert (link.seq, link.prev_hash, link.actor) == (2, "a" * 64, "admin:admin")
    assert link.data["changes"] == {
        "max_attempts": [3, 5],
        "safe_detail_keys": [[], ["field"]],
        "strict_codes": [False, True],
    }
    assert (saved.audit_seq, saved.audit_head) == (2, link.hash)


def test_the_admin_deletes_no_team_tool_or_key(admin_client: Client, team: Team) -> None:
    tool = Tool.objects.create(team=team, name="send_email")
    key = api_key_create(team=team, name="ci").api_key
    for url in (
        f"/admin/accounts/team/{team.pk}/delete/",
        f"/admin/envelopes/tool/{tool.pk}/delete/",
        f"/admin/accounts/apikey/{key.pk}/delete/",
    ):
        assert admin_client.post(url, {"post": "yes"}).status_code == 403, url
    assert Team.objects.filter(pk=team.pk).exists() and Tool.objects.filter(pk=tool.pk).exists()
