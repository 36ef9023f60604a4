"""The installed `holdpoint` command, in a fresh process, against a real Holdpoint (live_server):
a reviewer decides from a terminal, and the agent runs what was approved."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from holdpoint_sdk import Failure, Holdpoint, ToolError, input_fingerprint
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from accounts.services import api_key_create, reviewer_create, team_create
from envelopes.models import Step
from reviewers.services import reviewer_token_create

REF = "run_9/refund 1"  # a space and a slash: the command URL-encodes the ref
REFUND = {"order": "ord_7", "amount": 900, "currency": "EUR"}


def command() -> str:
    found = shutil.which("holdpoint", path=str(Path(sys.executable).parent))
    assert found, "the SDK's console script is missing: pip install -e sdk"
    return found


def holdpoint(live_server: LiveServer, token: str, *argv: str) -> subprocess.CompletedProcess[str]:
    # The SDK of this tree (the console script may be an editable install of another checkout).
    sdk = str(Path(__file__).resolve().parents[2] / "sdk")
    env = {"PATH": "/usr/bin:/bin", "HOLDPOINT_URL": live_server.url, "HOLDPOINT_TOKEN": token, "PYTHONPATH": sdk}
    return subprocess.run([command(), *argv], env=env, capture_output=True, text=True, timeout=60, check=False)


def token_of(team: Team, username: str, role: str) -> str:
    user = reviewer_create(username=username, password="x-unused-pw-1", team=team, role=role)
    return reviewer_token_create(user=user, name="terminal").raw


def refund_over_limit(payload: dict[str, Any], *, approved: bool = False) -> dict[str, Any]:
    if payload["amount"] > 500 and not approved:
        raise ToolError(Failure.approval_required("REFUND_ABOVE_LIMIT", safe_details={"limit": 500}))
    return {"refund_id": "re_1", "amount": payload["amount"]}


@pytest.fixture
def agent(live_server: LiveServer, request: pytest.FixtureRequest) -> Holdpoint:
    cache.clear()  # the reviewer API's throttle counts
    team = team_create(slug="cli")
    hp = Holdpoint(live_server.url, api_key_create(team=team, name="agent").raw, timeout=10)
    request.addfinalizer(hp.close)  # a kept-alive connection holds a server thread
    held = hp.guarded_call(tool="issue_refund", operation_ref=REF, input=REFUND, call=refund_over_limit)
    assert held.action == "hold"
    return hp


@pytest.mark.django_db(transaction=True)
def test_a_reviewer_decides_from_the_command_line(live_server: LiveServer, agent: Holdpoint) -> None:
    team = Step.objects.get(operation_ref=REF).team
    rita = reviewer_token_create(
        user=reviewer_create(username="rita", password="x-pw-1", team=team, role="reviewer"), name="t"
    ).raw
    vic = reviewer_token_create(
        user=reviewer_create(username="vic", password="x-pw-2", team=team, role="viewer"), name="t"
    ).raw

    queue = holdpoint(live_server, rita, "queue", "cli")
    assert queue.returncode == 0, queue.stderr
    assert REF in queue.stdout and "issue_refund" in queue.stdout and "approval_pending" in queue.stdout

    shown = holdpoint(live_server, rita, "--json", "show", "cli", REF)
    assert shown.returncode == 0, shown.stderr
    seen = json.loads(shown.stdout)
    assert seen["step"]["state"] == "awaiting_approval" and seen["etag"]
    etag = seen["etag"]

    # Refusals, each with its exit code, and nothing decided.
    viewer = holdpoint(live_server, vic, "approve", "cli", REF, "--etag", etag, "--reason", "ok")
    assert viewer.returncode == 4 and "not allowed" in viewer.stderr
    agent_key = holdpoint(live_server, agent._headers["Authorization"].removeprefix("Bearer "), "show", "cli", REF)
    assert agent_key.returncode == 4, agent_key.stderr
    stranger = holdpoint(live_server, "hpr_not_a_token", "queue", "cli")
    assert stranger.returncode == 3 and "HOLDPOINT_TOKEN" in stranger.stderr
    elsewhere = holdpoint(live_server, rita, "show", "another-team", REF)
    assert elsewhere.returncode == 5, elsewhere.stderr
    no_reason = holdpoint(live_server, rita, "reject", "cli", REF, "--etag", etag)
    assert no_reason.returncode == 9 and "reason" in no_reason.stderr
    assert Step.objects.get(operation_ref=REF).state == "awaiting_approval"

    approved = holdpoint(live_server, rita, "approve", "cli", REF, "--etag", etag, "--reason", "checked the order")
    assert approved.returncode == 0, approved.stderr
    assert "now retry_ready (approved)" in approved.stdout
    again = holdpoint(live_server, rita, "cancel", "cli", REF, "--etag", etag, "--reason", "changed my mind")
    assert again.returncode == 7
    assert again.stderr.strip() == "holdpoint: the step changed since you looked: run show again"

    # The agent learns it and runs its own input, as approved.
    decided = agent.wait_for_decision(REF, timeout=10, initial_interval=0.1)
    assert decided["directive"]["action"] == "proceed"
    with agent.guard(tool="issue_refund", operation_ref=REF, input=REFUND) as guard:
        done = guard.call(refund_over_limit, REFUND, approved=True)
    assert done.ok and not done.input_edited and done.result["amount"] == 900


@pytest.mark.django_db(transaction=True)
def test_an_input_edited_on_the_command_line_is_what_the_agent_runs(
    live_server: LiveServer, agent: Holdpoint, tmp_path: Path
) -> None:
    team = Step.objects.get(operation_ref=REF).team
    rita = token_of(team, "rita", "reviewer")

    shown = holdpoint(live_server, rita, "show", "cli", REF)
    assert shown.returncode == 0, shown.stderr
    assert '"amount": 900' in shown.stdout and f"sha256 {input_fingerprint(REFUND)}" in shown.stdout

    edited = {**REFUND, "amount": 400}
    (tmp_path / "edited.json").write_text(json.dumps(edited), encoding="utf-8")
    approved = holdpoint(
        live_server, rita, "approve", "cli", REF, "--reason", "partial refund", "--input", str(tmp_path / "edited.json")
    )
    assert approved.returncode == 0, approved.stderr
    assert f"approved the edited input, sha256 {input_fingerprint(edited)}" in approved.stdout

    decided = agent.wait_for_decision(REF, timeout=10, initial_interval=0.1)
    assert decided["directive"].get("input") == edited
    [decision] = decided["decisions"]
    assert decision.get("edited") is True and decision.get("input_fingerprint") == input_fingerprint(edited)
    with agent.guard(tool="issue_refund", operation_ref=REF, input=REFUND) as guard:
        done = guard.call(refund_over_limit, REFUND, approved=True)
    assert done.ok and done.input_edited and done.input == edited
    assert done.result == {"refund_id": "re_1", "amount": 400}
    assert done.step is not None and done.step["state"] == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_the_command_line_says_who_decides_a_step_held_for_a_group(live_server: LiveServer, agent: Holdpoint) -> None:
    from accounts.groups import group_create, group_member_add
    from envelopes.configuration import tool_configure

    team = Step.objects.get(operation_ref=REF).team
    group_create(team=team, name="finance")
    tool_configure(team=team, name="issue_refund", settings={"approver_group": "finance"}, actor="test")
    rita = token_of(team, "rita", "reviewer")
    fay_token = token_of(team, "fay", "reviewer")
    from django.contrib.auth import get_user_model

    group_member_add(team=team, name="finance", user=get_user_model().objects.get(username="fay"))

    queue = holdpoint(live_server, rita, "queue", "cli")
    assert "awaiting_approval for finance" in queue.stdout, queue.stdout
    assert "nothing waiting" in holdpoint(live_server, rita, "queue", "cli", "--for-me").stdout
    assert REF in holdpoint(live_server, fay_token, "queue", "cli", "--for-me").stdout
    shown = holdpoint(live_server, rita, "show", "cli", REF)
    assert "1 needed, for finance" in shown.stdout

    refused = holdpoint(live_server, rita, "approve", "cli", REF)
    assert refused.returncode != 0
    assert "not allowed: Only finance may decide this step" in refused.stderr + refused.stdout
    assert Step.objects.get(operation_ref=REF).state == "awaiting_approval"
    approved = holdpoint(live_server, fay_token, "approve", "cli", REF)
    assert approved.returncode == 0, approved.stderr
    assert Step.objects.get(operation_ref=REF).state == "retry_ready"
