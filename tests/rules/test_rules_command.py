"""`manage.py rules TEAM export | apply FILE [--dry-run]` in a fresh process, as a team keeps its
rules in git."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accounts.models import Team
from envelopes.models import AuditEvent
from policy.models import Rule, RuleSetVersion
from tests.rules.conftest import BIG_REFUNDS, NO_PROD_DROPS, attempt
from tests.test_commands_shell import manage

pytestmark = pytest.mark.django_db(transaction=True)


def write(tmp_path: Path, rules: list[dict], name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"version": 0, "rules": rules}, sort_keys=False))
    return path


def test_apply_then_export_round_trips(tmp_path: Path, team: Team) -> None:
    applied = manage("rules", "acme", "apply", str(write(tmp_path, [NO_PROD_DROPS, BIG_REFUNDS])))
    assert applied.returncode == 0, applied.stderr
    assert "applied: version 1" in applied.stdout
    assert "added no-prod-drops, big-refunds" in applied.stdout

    exported = manage("rules", "acme", "export")
    assert exported.returncode == 0, exported.stderr
    data = yaml.safe_load(exported.stdout)
    assert data["version"] == 1
    assert [rule["name"] for rule in data["rules"]] == ["no-prod-drops", "big-refunds"]
    assert data["rules"][1]["when"] == BIG_REFUNDS["when"] and "updated_at" not in data["rules"][1]
    link = AuditEvent.objects.get(chain=f"policy:{team.pk}")
    assert link.actor == "manage.py rules" and link.data["via"] == "command"

    # The export applies back as it is: no change, no new version.
    again = tmp_path / "again.yaml"
    again.write_text(exported.stdout)
    same = manage("rules", "acme", "apply", str(again))
    assert same.returncode == 0, same.stderr
    assert "no change" in same.stdout
    assert RuleSetVersion.objects.filter(team=team).count() == 1


def test_a_dry_run_prints_the_diff_and_the_test_and_saves_nothing(tmp_path: Path, team: Team, agent) -> None:  # type: ignore[no-untyped-def]
    attempt(agent, "run_1/refund_big", "issue_refund", {"amount_cents": 90000})
    attempt(agent, "run_1/refund_small", "issue_refund", {"amount_cents": 900})

    result = manage("rules", "acme", "apply", str(write(tmp_path, [BIG_REFUNDS])), "--dry-run")

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "diff against version 0: added big-refunds" in out
    assert "+  when: has(input.amount_cents) && input.amount_cents > 50000" in out
    assert "test against history: 2 attempt(s) of issue_refund" in out
    assert "1 from granted to held" in out and '"run_1/refund_big"' in out
    assert "dry run: nothing saved" in out
    assert not Rule.objects.filter(team=team).exists()


def test_a_broken_file_names_the_rule_field_and_position_and_applies_nothing(tmp_path: Path, team: Team) -> None:
    manage("rules", "acme", "apply", str(write(tmp_path, [BIG_REFUNDS])))
    broken = write(
        tmp_path, [{**BIG_REFUNDS, "when": "input.amount_cents > 5"}, {**NO_PROD_DROPS, "when": 'input.env == "prod'}]
    )

    result = manage("rules", "acme", "apply", str(broken))

    assert result.returncode != 0
    assert "nothing applied" in result.stderr
    assert "rule 'no-prod-drops', rules[1].when at position" in result.stderr
    assert list(Rule.objects.filter(team=team).values_list("when", flat=True)) == [BIG_REFUNDS["when"]]


def test_approvers_naming_a_missing_group_is_refused_and_applies_nothing(tmp_path: Path, team: Team) -> None:
    result = manage("rules", "acme", "apply", str(write(tmp_path, [{**BIG_REFUNDS, "approvers": "finance"}])))

    assert result.returncode != 0
    assert "nothing applied" in result.stderr
    assert "rules[0].approvers: acme has no group 'finance'" in result.stderr
    assert not Rule.objects.filter(team=team).exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rules: [unclosed", "not YAML at line 1"),
        ("rules: {a: 1}", "`rules` is a list"),
        ("version: 1\nrulez: []", "unknown top-level key 'rulez'"),
    ],
)
def test_a_file_that_is_no_rule_set_is_refused(tmp_path: Path, team: Team, text: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = manage("rules", "acme", "apply", str(path))
    assert result.returncode != 0
    assert says in result.stderr


def test_an_unknown_team_or_file_is_an_error(tmp_path: Path, team: Team) -> None:
    assert "No team 'nope'" in manage("rules", "nope", "export").stderr
    missing = manage("rules", "acme", "apply", str(tmp_path / "missing.yaml"))
    assert missing.returncode != 0 and "cannot read" in missing.stderr
