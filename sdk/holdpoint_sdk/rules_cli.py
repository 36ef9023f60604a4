"""`holdpoint rules pull | push | test`: a team's rules as a YAML file kept in git (contract §11).

    holdpoint rules pull payments > rules.yaml        # the set, with the version it was read at
    holdpoint rules test payments rules.yaml          # the test against history of the file's set
    holdpoint rules push payments rules.yaml          # replace the set (an admin's token)

`push` replaces the set only if it is still at the version the file was pulled at (`version:` in
the file): someone else's save in between is refused (exit 7) rather than overwritten; `--force`
pushes over whatever is there now. The file is the one `manage.py rules TEAM export` prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from .reviewer import Reviewer

EDITABLE = ("name", "description", "tools", "when", "effect", "approvals", "approvers", "mode", "enabled")
READ_ONLY = ("version", "updated_by", "updated_at")


class RulesUsageError(Exception):
    pass


class StaleFile(Exception):
    """The file was pulled at another version than the server's."""


def editable(rule: Mapping[str, Any]) -> dict[str, Any]:
    ordered = {name: rule[name] for name in EDITABLE if name in rule}
    ordered.update({k: v for k, v in rule.items() if k not in EDITABLE and k not in READ_ONLY})
    return ordered


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def to_yaml(team: str, version: int, rules: list[dict[str, Any]]) -> str:
    body = {"version": version, "rules": [editable(rule) for rule in rules]}
    head = f"# Holdpoint rules of team {team}, version {version}.\n"
    return head + yaml.dump(body, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def read_file(path: str, stdin: IO[str]) -> tuple[int | None, list[Any]]:
    """(the version the file was pulled at, or None; its rules)."""
    try:
        text = stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RulesUsageError(f"cannot read {path}: {error}") from error
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RulesUsageError(f"{path} is not YAML: {error}") from error
    version = None
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"version", "rules"})
        if unknown:
            raise RulesUsageError(f"{path}: unknown top-level key {unknown[0]!r} (a file holds version and rules)")
        raw_version = value.get("version")
        if raw_version is not None and (not isinstance(raw_version, int) or isinstance(raw_version, bool)):
            raise RulesUsageError(f"{path}: version is an integer")
        version = raw_version
        value = value.get("rules")
    if value is None:
        value = []
    if not isinstance(value, list):
        raise RulesUsageError(f"{path}: rules is a list")
    return version, [editable(rule) if isinstance(rule, Mapping) else rule for rule in value]


def report_text(data: Mapping[str, Any], safe: Any) -> str:
    tools = ", ".join(safe(tool) for tool in data.get("tools", []))
    capped = f" (the latest {data.get('attempts_cap')} only)" if data.get("capped") else ""
    lines = [f"test against history: {data['attempts']} attempt(s) of {tools} since {safe(data['since'])}{capped}"]
    for group in ("outcomes", "shadow"):
        for name, count in data["draft"][group].items():
            lines.append(f"  {safe(name):<12} current {data['current'][group].get(name, 0):>6}   draft {count:>6}")
    lines.append(f"  {'errors':<12} current {data['current']['errors']:>6}   draft {data['draft']['errors']:>6}")
    if not data["changes"]:
        lines.append("no change: the draft decides these attempts as the current set does")
    for change in data["changes"]:
        lines.append(f"{change['count']} from {safe(change['from'])} to {safe(change['to'])}, e.g.:")
        for example in change["examples"]:
            ref = json.dumps(example["operation_ref"], ensure_ascii=True)
            lines.append(
                f"  {ref} ({safe(example['tool'])}, attempt {example['attempt']}, {safe(example['granted_at'])})"
            )
    return "\n".join(lines)


def add_parser(commands: Any) -> None:
    rules = commands.add_parser("rules", help="a team's rules as a YAML file: pull, test, push")
    actions = rules.add_subparsers(dest="rules_action", required=True, metavar="pull|push|test")
    pull = actions.add_parser("pull", help="print the team's rule set as YAML (or write it to -o FILE)")
    pull.add_argument("team")
    pull.add_argument("-o", "--output", metavar="FILE", help="write the YAML here instead of stdout")
    test = actions.add_parser("test", help="the test against history of FILE's set (nothing is saved)")
    test.add_argument("team")
    test.add_argument("file", help="a rules file (- for stdin)")
    push = actions.add_parser("push", help="replace the team's whole set with FILE's (an admin's token)")
    push.add_argument("team")
    push.add_argument("file", help="a rules file (- for stdin)")
    push.add_argument("--force", action="store_true", help="push even if the set moved since the file's version")


def run(args: argparse.Namespace, reviewer: Reviewer, *, stdin: IO[str], stdout: IO[str], safe: Any) -> int:
    if args.rules_action == "pull":
        current = reviewer.rules(args.team)
        text = to_yaml(args.team, current.version, current.rules)
        if args.json:
            stdout.write(
                json.dumps({"version": current.version, "rules": current.rules, "etag": current.etag}, indent=2) + "\n"
            )
        elif args.output:
            Path(args.output).write_text(text, encoding="utf-8")
            stdout.write(f"wrote version {current.version} ({len(current.rules)} rules) to {args.output}\n")
        else:
            stdout.write(text)
        return 0
    version, rules = read_file(args.file, stdin or sys.stdin)
    if args.rules_action == "test":
        report = reviewer.rules_test(args.team, rules)
        stdout.write((json.dumps(report, indent=2) if args.json else report_text(report, safe)) + "\n")
        return 0
    current = reviewer.rules(args.team)
    if version is not None and version != current.version and not args.force:
        raise StaleFile(
            f"{args.file} was pulled at version {version}, and the set is at version {current.version} now: "
            "pull again and redo your change (or --force)"
        )
    before = {rule["name"]: editable(rule) for rule in current.rules}
    after = {rule.get("name"): rule for rule in rules if isinstance(rule, Mapping)}
    saved = reviewer.rules_replace(args.team, rules, etag=current.etag)
    if args.json:
        stdout.write(json.dumps({"version": saved.version, "rules": saved.rules, "etag": saved.etag}, indent=2) + "\n")
        return 0
    added = [name for name in after if name not in before]
    removed = [name for name in before if name not in after]
    changed = [name for name in after if name in before and before[name] != after[name]]
    what = "; ".join(
        f"{label} {', '.join(safe(str(n)) for n in names)}"
        for label, names in (("added", added), ("changed", changed), ("removed", removed))
        if names
    )
    if saved.version == current.version:
        stdout.write(f"no change: the set stays at version {saved.version}\n")
    else:
        stdout.write(f"pushed: version {saved.version} of {safe(args.team)}'s rules ({what or 'reordered'})\n")
    return 0
