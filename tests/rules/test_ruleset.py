"""A rule set as YAML and its diff (rules/ruleset.py): what the command, the pages and the API show."""

from __future__ import annotations

import pytest

from rules.ruleset import RulesFileInvalid, rule_editable, rules_diff, set_from_text, set_to_yaml
from tests.rules.conftest import BIG_REFUNDS, NO_PROD_DROPS


def test_yaml_round_trips_with_defaults_filled_and_server_fields_dropped() -> None:
    served = {**BIG_REFUNDS, "version": 3, "updated_by": "ada", "updated_at": "2026-12-01T10:00:00Z"}
    text = set_to_yaml(3, [served], team="acme")
    assert text.startswith("# Holdpoint rules of team acme, version 3.\nversion: 3\nrules:\n- name: big-refunds\n")
    (rule,) = set_from_text(text)
    assert rule == rule_editable(BIG_REFUNDS)
    assert rule["mode"] == "enforce" and rule["approvals"] == 1 and rule["approvers"] is None
    assert "version" not in rule and "updated_at" not in rule


def test_a_multi_line_expression_is_a_literal_block() -> None:
    when = "has(input.amount_cents) &&\n  input.amount_cents > 50000"
    text = set_to_yaml(1, [{**BIG_REFUNDS, "when": when}])
    assert "when: |-\n" in text
    assert set_from_text(text)[0]["when"] == when


@pytest.mark.parametrize(
    ("text", "rules"),
    [("", []), ("rules: []", []), ("[]", []), ('{"rules": [{"name": "a"}]}', [{"name": "a"}])],
)
def test_files_hold_a_set_or_a_bare_list(text: str, rules: list) -> None:
    assert [r.get("name") for r in set_from_text(text)] == [r.get("name") for r in rules]


@pytest.mark.parametrize("text", ["rules: [", "rules: 3", "rulez: []", "version: 1\nrules: {a: [}"])
def test_what_is_no_set_is_refused(text: str) -> None:
    with pytest.raises(RulesFileInvalid):
        set_from_text(text)


def test_the_diff_names_added_removed_changed_and_reordered_rules() -> None:
    current = [NO_PROD_DROPS, BIG_REFUNDS]
    draft = [{**BIG_REFUNDS, "approvals": 2}, {"name": "new-one", "tools": ["*"], "when": "true", "effect": "deny"}]
    diff = rules_diff(current, draft)
    assert diff.added == ["new-one"] and diff.removed == ["no-prod-drops"]
    assert [(c.field, c.before, c.after) for c in diff.changed["big-refunds"]] == [("approvals", 1, 2)]
    assert diff.summary() == "added new-one; changed big-refunds; removed no-prod-drops"
    assert "+  approvals: 2" in diff.text and "-- name: no-prod-drops" in diff.text
    assert rules_diff(current, [BIG_REFUNDS, NO_PROD_DROPS]).reordered is True
    assert rules_diff(current, [dict(r) for r in current]).empty
