"""A rule set as people edit it: the editable fields of each rule, in a stable order, as JSON or
YAML, and the diff between two sets. Pure: no database, so the command, the API, the pages and
the SDK's CLI show the same thing."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

# The fields a change names (contract §11); the rest of a rule's shape is the server's.
EDITABLE = ("name", "description", "tools", "when", "effect", "approvals", "approvers", "mode", "enabled")
READ_ONLY = ("version", "updated_by", "updated_at")
DEFAULTS: dict[str, Any] = {
    "description": "",
    "approvals": 1,
    "approvers": None,
    "mode": "enforce",
    "enabled": True,
}


def rule_editable(rule: Mapping[str, Any]) -> dict[str, Any]:
    """The editable fields of a rule as served or written, defaults filled in, read-only fields
    dropped (a pulled set pushes back unchanged); unknown keys are kept for the validation to
    name."""
    out: dict[str, Any] = {}
    for name in EDITABLE:
        if name in rule:
            out[name] = rule[name]
        elif name in DEFAULTS:
            out[name] = DEFAULTS[name]
    if out.get("approvers") == "":
        out["approvers"] = None
    for name, value in rule.items():
        if name not in EDITABLE and name not in READ_ONLY:
            out[name] = value
    return out


def set_editable(rules: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [rule_editable(rule) if isinstance(rule, Mapping) else rule for rule in rules]


# --- YAML ------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line text as literal blocks, so a long `when` reads as written."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def set_to_yaml(version: int, rules: Sequence[Mapping[str, Any]], *, team: str = "") -> str:
    head = f"# Holdpoint rules of team {team}, version {version}.\n" if team else ""
    body = {"version": version, "rules": [rule_editable(rule) for rule in rules]}
    return head + yaml.dump(body, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


class RulesFileInvalid(ValueError):
    pass


def set_from_text(text: str) -> list[Any]:
    """The rules of a file: YAML (JSON is YAML too) holding `{version?, rules: [...]}` or a bare
    list of rules. RulesFileInvalid names what is wrong."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise RulesFileInvalid(f"not YAML{where}: {getattr(error, 'problem', None) or error}") from error
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"version", "rules"})
        if unknown:
            raise RulesFileInvalid(f"unknown top-level key {unknown[0]!r}: a file holds `version` and `rules`")
        value = value.get("rules")
    if value is None:
        return []
    if not isinstance(value, list):
        raise RulesFileInvalid("`rules` is a list of rules")
    return value


# --- diff ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: Any
    after: Any


@dataclass
class RulesDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[FieldChange]] = field(default_factory=dict)
    reordered: bool = False
    text: str = ""  # a unified diff of the two sets as YAML

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.reordered)

    def as_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "removed": self.removed,
            "changed": {
                name: [{"field": c.field, "before": c.before, "after": c.after} for c in changes]
                for name, changes in self.changed.items()
            },
            "reordered": self.reordered,
            "text": self.text,
        }

    def summary(self) -> str:
        if self.empty:
            return "no change"
        parts = []
        if self.added:
            parts.append("added " + ", ".join(self.added))
        if self.changed:
            parts.append("changed " + ", ".join(self.changed))
        if self.removed:
            parts.append("removed " + ", ".join(self.removed))
        if self.reordered:
            parts.append("reordered")
        return "; ".join(parts)


def _named(rules: Sequence[Any]) -> dict[str, dict[str, Any]]:
    return {
        str(rule.get("name")): rule_editable(rule)
        for rule in rules
        if isinstance(rule, Mapping) and isinstance(rule.get("name"), str)
    }


def rules_diff(current: Sequence[Mapping[str, Any]], draft: Sequence[Any]) -> RulesDiff:
    """What `draft` changes against `current`, rule by rule (by name) and as a text diff."""
    before, after = _named(current), _named(draft)
    diff = RulesDiff(
        added=[name for name in after if name not in before],
        removed=[name for name in before if name not in after],
    )
    for name, rule in after.items():
        old = before.get(name)
        if old is None:
            continue
        changes = [
            FieldChange(key, old.get(key), rule.get(key))
            for key in dict.fromkeys([*old, *rule])
            if old.get(key) != rule.get(key)
        ]
        if changes:
            diff.changed[name] = changes
    kept_before = [name for name in before if name in after]
    kept_after = [name for name in after if name in before]
    diff.reordered = kept_before != kept_after
    old_text = set_to_yaml(0, list(before.values())).splitlines(keepends=True)[1:]
    new_text = set_to_yaml(0, [rule_editable(r) if isinstance(r, Mapping) else r for r in draft]).splitlines(
        keepends=True
    )[1:]
    diff.text = "".join(difflib.unified_diff(old_text, new_text, "current", "draft", n=2))
    return diff
