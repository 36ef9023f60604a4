"""examples/rules_refund.py against a real Holdpoint, each door a process of its own: a rule
holds the first refund before the tool runs, a reviewer approves it from the `holdpoint`
command with a one-hour grant for the customer, and the agent's next two refunds for that
customer go through with no human (contract §11)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.cache import cache
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from accounts.services import api_key_create, reviewer_create, team_create
from envelopes.models import Decision, Step
from policy.models import Grant
from policy.services import rules_replace
from reviewers.services import reviewer_token_create

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rules_refund.py"
RULE = {
    "name": "refunds-over-500",
    "tools": ["refund"],
    "when": "has(input.amount_cents) && input.amount_cents > 50000",
    "effect": "require_approval",
}


def wait_for_state(team: Team, ref: str, state: str, *, within: float) -> None:
    deadline = time.monotonic() + within
    while not Step.objects.filter(team=team, operation_ref=ref, state=state).exists():
        assert time.monotonic() < deadline, f"{ref} never reached {state}"
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_rule_holds_a_refund_a_grant_lets_the_next_two_through(live_server: LiveServer) -> None:
    cache.clear()
    team = team_create(slug="demo")
    rules_replace(team=team, rules=[RULE], actor="ada", if_version=None)
    key = api_key_create(team=team, name="example").raw
    rita = reviewer_create(username="rita", password="x-unused-pw-1", team=team, role="reviewer")
    token = reviewer_token_create(user=rita, name="terminal").raw
    env = {"PATH": "/usr/bin:/bin", "HOLDPOINT_URL": live_server.url}
    agent = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--api-key", key, "--run-id", "rules-1", "--wait-for-approval", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for_state(team, "rules-1/refund_1", "awaiting_approval", within=30)
        held = Step.objects.get(team=team, operation_ref="rules-1/refund_1")
        assert held.reason == "approval_required_by_rule"
        holdpoint = shutil.which("holdpoint", path=str(Path(sys.executable).parent))
        assert holdpoint, "the SDK's console script is missing: pip install -e sdk"
        approve = subprocess.run(
            [holdpoint, "approve", "demo", "rules-1/refund_1", "--reason", "billing checked cus_42",
             "--grant-scope", "team", "--grant-expires-in", "3600", "--grant-when", 'input.customer == "cus_42"'],
            env={**env, "HOLDPOINT_TOKEN": token}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert approve.returncode == 0, approve.stderr
        grant = Grant.objects.get(team=team)
        assert f'grant {grant.pk}: similar calls of refund where the input\'s customer is "cus_42"' in approve.stdout
        printed, _ = agent.communicate(timeout=90)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()

    assert agent.returncode == 0, printed
    assert "every step went as the rule and the grant say" in printed
    assert "refund_1: hold (approval_required) by rule refunds-over-500 v1" in printed
    states = dict(Step.objects.filter(team=team).values_list("operation_ref", "state"))
    assert states == {
        "rules-1/refund_1": "succeeded",
        "rules-1/refund_2": "succeeded",
        "rules-1/refund_3": "succeeded",
        "rules-1/refund_4": "awaiting_approval",
    }
    # No human decided the two refunds the grant let through; the grant counted them.
    assert list(Decision.objects.filter(step__team=team).values_list("step__operation_ref", flat=True)) == [
        "rules-1/refund_1"
    ]
    grant.refresh_from_db()
    assert (grant.uses, grant.created_by, grant.from_step_id) == (2, "rita", held.pk)
    assert 3590 <= (grant.expires_at - grant.created_at).total_seconds() <= 3600
