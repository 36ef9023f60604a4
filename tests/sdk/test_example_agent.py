"""examples/agent.py plays every seed scenario against a real Holdpoint."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from accounts.services import api_key_create, reviewer_create, team_create
from envelopes.models import Step, Tool
from reviewers.services import reviewer_token_create

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_agent", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.django_db(transaction=True)
def test_the_example_agent_gets_the_promised_directive_in_every_scenario(
    live_server: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    team = team_create(slug="demo")
    key = api_key_create(team=team, name="example").raw
    code = load_example().main(
        ["--base-url", live_server.url, "--api-key", key, "--run-id", "demo-1", "--retry-after", "1"]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "every directive was the one the contract promises" in printed
    states = dict(Step.objects.filter(team=team).values_list("operation_ref", "state"))
    assert states == {
        "demo-1/send_email": "succeeded",
        "demo-1/search_contacts": "succeeded",
        "demo-1/create_invoice": "succeeded",
        "demo-1/issue_refund": "awaiting_approval",
        "demo-1/charge_1": "waiting_retry",
    }
    assert Tool.objects.get(team=team, name="charge_card").is_halted()
    assert "/steps/" in printed  # the reviewer's link


def wait_for_state(team: Team, ref: str, state: str, *, within: float) -> None:
    """Until the agent process has brought the step to `state` (it runs on its own clock)."""
    deadline = time.monotonic() + within
    while not Step.objects.filter(team=team, operation_ref=ref, state=state).exists():
        assert time.monotonic() < deadline, f"{ref} never reached {state}"
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_the_example_agent_waits_and_runs_the_input_a_reviewer_edited(live_server: LiveServer, tmp_path: Path) -> None:
    """Both doors a user goes through, each a process of its own: the example agent with
    --wait-for-approval, and a reviewer approving a lower amount with the holdpoint command."""
    team = team_create(slug="demo")
    key = api_key_create(team=team, name="example").raw
    reviewer = reviewer_create(username="rita", password="x-unused-pw-1", team=team, role="reviewer")
    token = reviewer_token_create(user=reviewer, name="terminal").raw
    env = {"PATH": "/usr/bin:/bin", "HOLDPOINT_URL": live_server.url}
    agent = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--api-key", key, "--scenario", "approval", "--run-id", "demo-2",
         "--wait-for-approval", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for_state(team, "demo-2/issue_refund", "awaiting_approval", within=30)
        edited = tmp_path / "edited.json"
        edited.write_text(json.dumps({"order": "ord_7", "amount": 400, "currency": "EUR"}), encoding="utf-8")
        holdpoint = shutil.which("holdpoint", path=str(Path(sys.executable).parent))
        assert holdpoint, "the SDK's console script is missing: pip install -e sdk"
        approve = subprocess.run(
            [holdpoint, "approve", "demo", "demo-2/issue_refund", "--reason", "partial refund", "--input", str(edited)],
            env={**env, "HOLDPOINT_TOKEN": token}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert approve.returncode == 0, approve.stderr
        printed, _ = agent.communicate(timeout=90)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    assert agent.returncode == 0, printed
    assert 'the reviewer edited the input: {"amount": 400, "currency": "EUR", "order": "ord_7"}' in printed
    assert (
        'issue_refund: ran {"amount": 400, "currency": "EUR", "order": "ord_7"} (the reviewer\'s edit) -> stop'
        in printed
    )
    assert Step.objects.get(team=team, operation_ref="demo-2/issue_refund").state == "succeeded"
