"""The management commands of contract §8."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounts.models import ApiKey, Membership, Team
from envelopes.models import AuditEvent, ErrorCode, Step, Tool
from tests.conftest import AgentClient, error_envelope, success_envelope

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_createteam_and_createapikey_print_a_working_key_alone_on_the_last_line() -> None:
    run("createteam", "acme")
    output = run("createapikey", "--team", "acme", "--name", "ci")
    raw = output.strip().splitlines()[-1]
    assert raw.startswith("hp_")
    key = ApiKey.objects.get()
    assert key.key_hash == ApiKey.hash_key(raw)
    assert raw not in {key.prefix, key.key_hash, key.name}
    assert AgentClient(raw).envelope(error_envelope()).status_code == 201


def test_createteam_refuses_a_duplicate() -> None:
    run("createteam", "acme")
    with pytest.raises(CommandError):
        run("createteam", "acme")


def test_createreviewer_takes_the_password_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("HOLDPOINT_PASSWORD", "a-long-password")
    run("createteam", "acme")
    run("createreviewer", "rita", "--team", "acme", "--role", "reviewer")
    membership = Membership.objects.get()
    assert membership.role == "reviewer"
    assert membership.user.check_password("a-long-password")


def test_configuretool_sets_typed_values_and_refuses_a_broken_rule(team) -> None:
    run(
        "configuretool",
        "acme",
        "create_invoice",
        "approval_ttl_s=60",
        "required_approvals=2",
        "safe_detail_keys=invoice_id,amount",
        "strict_codes=true",
    )
    tool = Tool.objects.get(name="create_invoice")
    assert (tool.approval_ttl_s, tool.required_approvals, tool.safe_detail_keys, tool.strict_codes) == (
        60,
        2,
        ["invoice_id", "amount"],
        True,
    )
    with pytest.raises(CommandError, match="verification_deadline_s"):
        run("configuretool", "acme", "create_invoice", "consistency_window_s=600", "verification_deadline_s=300")
    with pytest.raises(CommandError, match="required_approvals must be 1 to 5"):
        run("configuretool", "acme", "create_invoice", "required_approvals=6")
    with pytest.raises(CommandError, match="approver_group names no group"):
        run("configuretool", "acme", "create_invoice", "approver_group=legal")
    with pytest.raises(CommandError, match="approver_group must be a group name"):
        run("configuretool", "acme", "create_invoice", "approver_group=Legal")
    with pytest.raises(CommandError):
        run("configuretool", "acme", "create_invoice", "colour=blue")
    assert Tool.objects.get(name="create_invoice").required_approvals == 2


def test_addcode_documents_per_tool_and_team_wide(team) -> None:
    run(
        "addcode",
        "acme",
        "send_email",
        "INVALID_RECIPIENT_ADDRESS",
        "category=validation",
        "retry_class=correctable",
        "next_action=correct_input",
        "side_effect=none",
        "hint=Ask for a new address",
    )
    run(
        "addcode",
        "acme",
        "*",
        "RATE_LIMITED",
        "category=rate_limit",
        "retry_class=transient",
        "next_action=wait_and_retry",
        "side_effect=none",
    )
    assert ErrorCode.objects.get(code="INVALID_RECIPIENT_ADDRESS").tool.name == "send_email"
    assert ErrorCode.objects.get(code="RATE_LIMITED").tool is None
    with pytest.raises(CommandError):
        run("addcode", "acme", "send_email", "X_CODE", "category=weather", "retry_class=transient", "next_action=abort")


def test_verify_audit_passes_and_fails_when_a_link_is_altered(agent) -> None:
    agent.envelope(error_envelope())
    agent.envelope(success_envelope())
    assert "intact" in run("verify_audit", "--seal")
    AuditEvent.objects.filter(after="succeeded").update(reason="rejected")
    with pytest.raises(CommandError, match="tampered"):
        run("verify_audit")


def test_verify_audit_detects_a_deleted_history(agent) -> None:
    agent.envelope(error_envelope())
    agent.envelope(success_envelope())
    run("verify_audit", "--seal")
    AuditEvent.objects.filter(after="succeeded").delete()
    Step.objects.update(audit_seq=1)
    with pytest.raises(CommandError):
        run("verify_audit")


def test_demo_loads_every_state_and_prints_a_key() -> None:
    output = run("demo")
    raw = output.strip().splitlines()[-1]
    assert raw.startswith("hp_")
    states = set(Step.objects.values_list("state", flat=True))
    assert states == {
        "in_progress",
        "needs_input",
        "waiting_retry",
        "retry_ready",
        "verifying",
        "awaiting_approval",
        "escalated",
        "succeeded",
        "cancelled",
        "failed",
    }
    assert Team.objects.get(slug="demo").tools.filter(halted_until__isnull=False).exists()
    again = run("demo")
    assert again.strip().splitlines()[-1] != raw
    assert Team.objects.count() == 1


@pytest.mark.parametrize("name", ["Create_Invoice", "send email", "_leading", "a" * 101, "*", "tools/x", "x\n"])
def test_configuretool_refuses_a_tool_name_outside_the_contract_pattern(team, name: str) -> None:
    with pytest.raises(CommandError, match="tool name"):
        run("configuretool", "acme", name, "max_attempts=2")
    assert not Tool.objects.exists()


RATE_LIMITED_FIELDS = ("category=rate_limit", "retry_class=transient", "next_action=abort")


@pytest.mark.parametrize("name", ["Send_Email", "send email", "", "a" * 101, "**"])
def test_addcode_refuses_a_tool_name_outside_the_contract_pattern(team, name: str) -> None:
    with pytest.raises(CommandError, match="tool name"):
        run("addcode", "acme", name, "RATE_LIMITED", *RATE_LIMITED_FIELDS)
    assert not Tool.objects.exists() and not ErrorCode.objects.exists()


def test_configuretool_and_addcode_accept_every_character_the_pattern_allows(team) -> None:
    run("configuretool", "acme", "crm.v2_create-invoice", "max_attempts=2")
    run("addcode", "acme", "0tool", "RATE_LIMITED", *RATE_LIMITED_FIELDS)
    assert set(Tool.objects.values_list("name", flat=True)) == {"crm.v2_create-invoice", "0tool"}


@pytest.mark.parametrize(("password", "message"), [("short1", "too short"), ("password123", "too common")])
def test_createreviewer_runs_the_password_validators(team, monkeypatch, password: str, message: str) -> None:
    monkeypatch.setenv("HOLDPOINT_PASSWORD", password)
    with pytest.raises(CommandError, match=message):
        run("createreviewer", "rita", "--team", "acme", "--role", "reviewer")
    assert not Membership.objects.exists()


def test_createreviewer_refuses_an_invalid_username(team, monkeypatch) -> None:
    monkeypatch.setenv("HOLDPOINT_PASSWORD", "a-long-password")
    with pytest.raises(CommandError, match="Username"):
        run("createreviewer", "rita smith!", "--team", "acme", "--role", "reviewer")
    assert not Membership.objects.exists()


def test_createreviewer_refuses_an_existing_user_unless_told_to_reset(team, monkeypatch) -> None:
    monkeypatch.setenv("HOLDPOINT_PASSWORD", "a-long-password")
    run("createreviewer", "rita", "--team", "acme", "--role", "reviewer")
    monkeypatch.setenv("HOLDPOINT_PASSWORD", "another-long-password")
    with pytest.raises(CommandError, match="already exists"):
        run("createreviewer", "rita", "--team", "acme", "--role", "admin")
    membership = Membership.objects.get()
    assert membership.role == "reviewer" and membership.user.check_password("a-long-password")
    run("createreviewer", "rita", "--team", "acme", "--role", "admin", "--reset-password")
    membership = Membership.objects.get()
    assert membership.role == "admin" and membership.user.check_password("another-long-password")
