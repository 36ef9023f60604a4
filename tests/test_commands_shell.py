"""Every command of contract §8 run the way a user runs it: `python manage.py …` in a fresh
process, pointed at the test database (call_command skips Django's own option handling, which
is how configuretool's crash went unseen)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import global_settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.models import ApiKey, Membership, Team
from accounts.services import api_key_create, team_create
from envelopes import services
from envelopes.models import AuditEvent, ErrorCode, Step, Tool
from metrics.models import ToolHour
from tests import worker
from tests.conftest import AgentClient, error_envelope, success_envelope
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)

STRONG = "plum-orchard-lantern-42"


@pytest.fixture(autouse=True)
def _real_hashers(settings) -> None:  # type: ignore[no-untyped-def]
    """The child hashes with the project's hashers; this process must be able to check them."""
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS


def manage(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` in a new process and session (no terminal: getpass reads stdin)."""
    child_env = {**os.environ, "DATABASE_URL": worker.test_database_url(), "DJANGO_SETTINGS_MODULE": "config.settings"}
    child_env.pop("HOLDPOINT_PASSWORD", None)
    child_env.setdefault("SECRET_KEY", "holdpoint-test-commands-shell-key-not-a-secret-padded")
    child_env.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=worker.ROOT,
        env=child_env,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_createteam_creates_a_team_and_refuses_a_duplicate() -> None:
    assert manage("createteam", "acme", "--name", "Acme Corp").returncode == 0
    assert Team.objects.get(slug="acme").name == "Acme Corp"
    again = manage("createteam", "acme")
    assert again.returncode != 0
    assert "slug" in again.stderr
    assert Team.objects.count() == 1


def test_createapikey_prints_a_working_key_alone_on_the_last_line_and_revokeapikey_ends_it() -> None:
    team_create(slug="acme")
    created = manage("createapikey", "--team", "acme", "--name", "ci")
    raw = last_line(created)
    key = ApiKey.objects.get(team__slug="acme")
    assert raw.startswith("hp_") and key.key_hash == ApiKey.hash_key(raw) and key.name == "ci"
    assert created.stdout.count(raw) == 1
    agent = AgentClient(raw)
    assert agent.envelope(error_envelope()).status_code == 201

    # The prefix exactly as createapikey printed it, ellipsis included.
    printed_prefix = created.stdout.split()[2]
    assert printed_prefix.startswith(key.prefix)
    revoked = manage("revokeapikey", "--team", "acme", "--prefix", printed_prefix)
    assert revoked.returncode == 0, revoked.stderr
    assert agent.envelope(error_envelope()).status_code == 401
    assert ApiKey.objects.get().revoked_at is not None


def test_revokeapikey_refuses_a_prefix_the_team_does_not_have() -> None:
    team_create(slug="acme")
    other = api_key_create(team=team_create(slug="globex"), name="theirs")
    result = manage("revokeapikey", "--team", "acme", "--prefix", other.api_key.prefix)
    assert result.returncode != 0
    assert "no API key" in result.stderr
    assert ApiKey.objects.get().revoked_at is None


def test_createreviewer_takes_the_password_from_the_environment() -> None:
    team_create(slug="acme")
    result = manage("createreviewer", "rita", "--team", "acme", "--role", "reviewer", HOLDPOINT_PASSWORD=STRONG)
    assert result.returncode == 0, result.stderr
    membership = Membership.objects.get()
    assert (membership.user.username, membership.team.slug, membership.role) == ("rita", "acme", "reviewer")
    assert membership.user.check_password(STRONG)


def test_createreviewer_asks_for_the_password_twice_without_the_environment() -> None:
    team_create(slug="acme")
    differ = manage("createreviewer", "rita", "--team", "acme", "--role", "admin", stdin=f"{STRONG}\nsomething-else\n")
    assert differ.returncode != 0
    assert "differ" in differ.stderr
    assert not get_user_model().objects.exists()
    result = manage("createreviewer", "rita", "--team", "acme", "--role", "admin", stdin=f"{STRONG}\n{STRONG}\n")
    assert result.returncode == 0, result.stderr
    assert get_user_model().objects.get(username="rita").check_password(STRONG)


def test_createreviewer_refuses_a_weak_password_with_the_validators_message() -> None:
    team_create(slug="acme")
    result = manage("createreviewer", "rita", "--team", "acme", "--role", "reviewer", HOLDPOINT_PASSWORD="password123")
    assert result.returncode != 0
    assert "too common" in result.stderr
    assert not get_user_model().objects.exists()


def test_createreviewer_never_silently_resets_an_existing_users_password() -> None:
    team_create(slug="acme")
    team_create(slug="globex")
    assert (
        manage("createreviewer", "rita", "--team", "acme", "--role", "admin", HOLDPOINT_PASSWORD=STRONG).returncode == 0
    )

    globex_viewer = ("createreviewer", "rita", "--team", "globex", "--role", "viewer")
    again = manage(*globex_viewer, HOLDPOINT_PASSWORD="x-new-pass-99")
    assert again.returncode != 0
    assert "already exists" in again.stderr and "--reset-password" in again.stderr
    rita = get_user_model().objects.get(username="rita")
    assert rita.check_password(STRONG)
    assert list(Membership.objects.values_list("team__slug", "role")) == [("acme", "admin")]

    weak = manage(
        "createreviewer", "rita", "--team", "acme", "--role", "admin", "--reset-password", HOLDPOINT_PASSWORD="abc"
    )
    assert weak.returncode != 0
    rita.refresh_from_db()
    assert rita.check_password(STRONG)

    reset = manage(
        "createreviewer",
        "rita",
        "--team",
        "globex",
        "--role",
        "viewer",
        "--reset-password",
        HOLDPOINT_PASSWORD="x-new-pass-99",
    )
    assert reset.returncode == 0, reset.stderr
    assert "password reset" in reset.stdout
    rita.refresh_from_db()
    assert rita.check_password("x-new-pass-99")
    assert set(Membership.objects.values_list("team__slug", "role")) == {("acme", "admin"), ("globex", "viewer")}


def test_configuretool_sets_typed_values_from_the_shell() -> None:
    team_create(slug="acme")
    result = manage(
        "configuretool",
        "acme",
        "create_invoice",
        "approval_ttl_s=60",
        "required_approvals=2",
        "safe_detail_keys=invoice_id,amount",
        "strict_codes=true",
    )
    assert result.returncode == 0, result.stderr
    tool = Tool.objects.get(team__slug="acme", name="create_invoice")
    assert (tool.approval_ttl_s, tool.required_approvals, tool.safe_detail_keys, tool.strict_codes) == (
        60,
        2,
        ["invoice_id", "amount"],
        True,
    )
    link = AuditEvent.objects.get(tool=tool, kind=AuditEvent.Kind.SETTINGS)
    assert link.actor == "manage.py configuretool"
    assert link.data["changes"]["required_approvals"] == [1, 2]


def test_configuretool_refuses_a_broken_rule_and_leaves_the_tool_as_it_was() -> None:
    team_create(slug="acme")
    assert manage("configuretool", "acme", "create_invoice", "required_approvals=2").returncode == 0
    for pairs in (["consistency_window_s=600", "verification_deadline_s=300"], ["approval_ttl_s"]):
        result = manage("configuretool", "acme", "create_invoice", *pairs)
        assert result.returncode != 0, pairs
        assert "CommandError" in result.stderr and "Traceback" not in result.stderr
    tool = Tool.objects.get(name="create_invoice")
    assert (tool.required_approvals, tool.consistency_window_s) == (2, 300)


def test_configuretool_refuses_a_tool_name_outside_the_contract_pattern() -> None:
    team_create(slug="acme")
    result = manage("configuretool", "acme", "Create Invoice", "max_attempts=2")
    assert result.returncode != 0
    assert "tool name" in result.stderr
    assert not Tool.objects.exists()


def test_addcode_documents_per_tool_and_team_wide_from_the_shell() -> None:
    team_create(slug="acme")
    per_tool = manage(
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
    assert per_tool.returncode == 0, per_tool.stderr
    team_wide = manage(
        "addcode",
        "acme",
        "*",
        "RATE_LIMITED",
        "category=rate_limit",
        "retry_class=transient",
        "next_action=wait_and_retry",
        "side_effect=none",
    )
    assert team_wide.returncode == 0, team_wide.stderr
    entry = ErrorCode.objects.get(code="INVALID_RECIPIENT_ADDRESS")
    assert (entry.tool.name if entry.tool else None, entry.hint) == ("send_email", "Ask for a new address")
    assert ErrorCode.objects.get(code="RATE_LIMITED").tool is None

    wrong = manage(
        "addcode", "acme", "send_email", "X_CODE", "category=weather", "retry_class=transient", "next_action=abort"
    )
    assert wrong.returncode != 0
    assert "category" in wrong.stderr
    assert not ErrorCode.objects.filter(code="X_CODE").exists()


def test_addcode_refuses_a_tool_name_outside_the_contract_pattern() -> None:
    team_create(slug="acme")
    result = manage(
        "addcode",
        "acme",
        "Send Email",
        "RATE_LIMITED",
        "category=rate_limit",
        "retry_class=transient",
        "next_action=abort",
    )
    assert result.returncode != 0
    assert "tool name" in result.stderr
    assert not Tool.objects.exists() and not ErrorCode.objects.exists()


def test_createwebhook_prints_the_secret_alone_on_the_last_line() -> None:
    team_create(slug="acme")
    result = manage(
        "createwebhook", "--team", "acme", "--url", "http://127.0.0.1:9/hook", HOLDPOINT_WEBHOOK_ALLOW_PRIVATE="true"
    )
    secret = last_line(result)
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.team.slug, endpoint.url, endpoint.secret) == ("acme", "http://127.0.0.1:9/hook", secret)
    assert secret.startswith("whsec_")


def test_createwebhook_refuses_a_private_address_by_default() -> None:
    team_create(slug="acme")
    result = manage(
        "createwebhook", "--team", "acme", "--url", "http://127.0.0.1:9/hook", HOLDPOINT_WEBHOOK_ALLOW_PRIVATE="false"
    )
    assert result.returncode != 0
    assert "Refused" in result.stderr
    assert not WebhookEndpoint.objects.exists()


def test_verify_audit_passes_then_exits_non_zero_when_a_link_is_altered() -> None:
    agent = AgentClient(api_key_create(team=team_create(slug="acme"), name="agent").raw)
    assert agent.envelope(error_envelope()).status_code == 201
    assert agent.envelope(success_envelope()).status_code == 201

    sealed = manage("verify_audit", "--seal")
    assert sealed.returncode == 0, sealed.stderr
    assert "intact" in sealed.stdout
    AuditEvent.objects.filter(after="succeeded").update(reason="rejected")
    tampered = manage("verify_audit")
    assert tampered.returncode != 0
    assert "tampered" in tampered.stderr


def test_demo_loads_every_state_and_a_second_run_keeps_the_users_passwords() -> None:
    first = manage("demo")
    raw = last_line(first)
    assert "Password:   holdpoint-demo" in first.stdout
    assert set(Step.objects.values_list("state", flat=True)) == {
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
    assert AgentClient(raw).envelope(error_envelope(operation_ref="first-look")).status_code == 201

    # scripts/run runs demo on every start; a changed password must survive it.
    reviewer = get_user_model().objects.get(username="reviewer")
    reviewer.set_password(STRONG)
    reviewer.save()
    second = manage("demo", HOLDPOINT_PASSWORD="another-long-password")
    assert last_line(second).startswith("hp_") and last_line(second) != raw
    assert "keep their passwords" in second.stdout
    assert "another-long-password" not in second.stdout
    reviewer.refresh_from_db()
    assert reviewer.check_password(STRONG)
    assert get_user_model().objects.get(username="viewer").check_password("holdpoint-demo")
    assert Team.objects.count() == 1


def test_demo_refuses_a_weak_password_before_writing_anything() -> None:
    result = manage("demo", HOLDPOINT_PASSWORD="abc")
    assert result.returncode != 0
    assert "too short" in result.stderr
    assert not Team.objects.exists() and not get_user_model().objects.exists()


def test_rollup_metrics_rolls_a_closed_hour_into_a_row() -> None:
    team = team_create(slug="acme")
    three_hours_ago = timezone.now() - timedelta(hours=3)
    body = error_envelope()
    services.envelope_ingest(
        team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode(), now=three_hours_ago
    )
    result = manage("rollup_metrics")
    assert result.returncode == 0, result.stderr
    rolled = int(result.stdout.split()[1])
    assert rolled >= 1
    hour = three_hours_ago.replace(minute=0, second=0, microsecond=0)
    row = ToolHour.objects.get(tool__name="send_email", hour=hour)
    assert (row.envelopes, row.errors, row.by_code) == (1, 1, {"INVALID_RECIPIENT_ADDRESS": 1})

    bad = manage("rollup_metrics", "--rebuild-from", "yesterday")
    assert bad.returncode != 0
    assert "RFC 3339" in bad.stderr
