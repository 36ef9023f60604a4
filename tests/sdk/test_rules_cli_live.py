"""`holdpoint rules pull | test | push`, the installed command in a fresh process, against a
real Holdpoint (live_server): a team keeps its rules in a file under review."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.cache import cache
from holdpoint_sdk import Holdpoint, input_fingerprint
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from accounts.services import api_key_create, reviewer_create, team_create
from policy.models import Rule
from reviewers.services import reviewer_token_create
from tests.sdk.test_reviewer_cli_live import holdpoint

BIG_REFUNDS = {
    "name": "big-refunds",
    "tools": ["issue_refund"],
    "when": "has(input.amount_cents) && input.amount_cents > 50000",
    "effect": "require_approval",
}


def token_of(team: Team, username: str, role: str) -> str:
    user = reviewer_create(username=username, password="x-unused-pw-1", team=team, role=role)
    return reviewer_token_create(user=user, name="terminal").raw


@pytest.fixture
def team(live_server: LiveServer, request: pytest.FixtureRequest) -> Team:
    cache.clear()
    team = team_create(slug="git")
    hp = Holdpoint(live_server.url, api_key_create(team=team, name="agent").raw, timeout=10)
    request.addfinalizer(hp.close)
    for number, cents in enumerate([90000, 900]):
        payload = {"order": f"ord_{number}", "amount_cents": cents}
        hp.request_attempt(
            f"run_5/refund_{number}", tool="issue_refund", input_fingerprint=input_fingerprint(payload), input=payload
        )
    return team


@pytest.mark.django_db(transaction=True)
def test_pull_edit_test_push(live_server: LiveServer, team: Team, tmp_path: Path) -> None:
    ada = token_of(team, "ada", "admin")
    vic = token_of(team, "vic", "viewer")
    file = tmp_path / "rules.yaml"

    pulled = holdpoint(live_server, ada, "rules", "pull", "git", "-o", str(file))
    assert pulled.returncode == 0, pulled.stderr
    assert yaml.safe_load(file.read_text()) == {"version": 0, "rules": []}

    file.write_text(yaml.safe_dump({"version": 0, "rules": [BIG_REFUNDS]}, sort_keys=False))
    tested = holdpoint(live_server, vic, "rules", "test", "git", str(file))  # a viewer may test
    assert tested.returncode == 0, tested.stderr
    assert "test against history: 2 attempt(s) of issue_refund" in tested.stdout
    assert "1 from granted to held" in tested.stdout and '"run_5/refund_0"' in tested.stdout

    refused = holdpoint(live_server, vic, "rules", "push", "git", str(file))
    assert refused.returncode == 4 and "not allowed" in refused.stderr
    assert not Rule.objects.filter(team=team).exists()

    pushed = holdpoint(live_server, ada, "rules", "push", "git", str(file))
    assert pushed.returncode == 0, pushed.stderr
    assert "pushed: version 1 of git's rules (added big-refunds)" in pushed.stdout
    assert list(Rule.objects.filter(team=team).values_list("name", flat=True)) == ["big-refunds"]

    # The file still says version 0: pushing it again would overwrite version 1 unseen.
    stale = holdpoint(live_server, ada, "rules", "push", "git", str(file))
    assert stale.returncode == 7 and "pulled at version 0" in stale.stderr

    printed = holdpoint(live_server, ada, "rules", "pull", "git")
    assert printed.returncode == 0 and yaml.safe_load(printed.stdout)["version"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_broken_rule_is_refused_naming_field_and_position(
    live_server: LiveServer, team: Team, tmp_path: Path
) -> None:
    ada = token_of(team, "ada", "admin")
    file = tmp_path / "rules.yaml"
    file.write_text(yaml.safe_dump({"version": 0, "rules": [{**BIG_REFUNDS, "when": "input.amount_cents >"}]}))

    for action in ("test", "push"):
        result = holdpoint(live_server, ada, "rules", action, "git", str(file))
        assert result.returncode == 9, result.stderr
        assert "rules[0].when (rule big-refunds) at position" in result.stderr
    assert not Rule.objects.filter(team=team).exists()

    file.write_text("rules: [unclosed")
    assert holdpoint(live_server, ada, "rules", "push", "git", str(file)).returncode == 2
    assert holdpoint(live_server, ada, "rules", "pull", "elsewhere").returncode == 5
