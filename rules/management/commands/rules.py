"""`manage.py rules TEAM export` and `rules TEAM apply FILE [--dry-run]`: a team's rules as code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Team
from policy.errors import RulesInvalid, VersionMismatch
from rules.history import history_test
from rules.ruleset import RulesFileInvalid, rules_diff, set_editable, set_from_text, set_to_yaml
from rules.services import rule_set_replace, rule_shape, rules_current
from rules.validation import problem_line

ACTOR = "manage.py rules"


def report_text(data: dict[str, Any]) -> str:
    """The test against history for a terminal: counts per outcome, current → draft, and each
    change with its example steps (their operation_refs escaped as JSON strings: agent text)."""
    lines = [
        f"test against history: {data['attempts']} attempt(s) of {', '.join(data['tools'])} "
        f"since {data['since']}" + (f" (the latest {data['attempts_cap']} only)" if data["capped"] else "")
    ]
    for name, count in data["draft"]["outcomes"].items():
        lines.append(f"  {name:<10} current {data['current']['outcomes'][name]:>6}   draft {count:>6}")
    for name, count in data["draft"]["shadow"].items():
        lines.append(f"  {name:<10} current {data['current']['shadow'][name]:>6}   draft {count:>6}")
    lines.append(f"  {'errors':<10} current {data['current']['errors']:>6}   draft {data['draft']['errors']:>6}")
    if not data["changes"]:
        lines.append("no change: the draft decides these attempts as the current set does")
    for change in data["changes"]:
        lines.append(f"{change['count']} from {change['from']} to {change['to']}, e.g.:")
        for example in change["examples"]:
            ref = json.dumps(example["operation_ref"], ensure_ascii=True)
            lines.append(f"  {ref} ({example['tool']}, attempt {example['attempt']}, {example['granted_at']})")
    return "\n".join(lines)


class Command(BaseCommand):
    help = "A team's rules as YAML: `rules TEAM export` prints them; `rules TEAM apply FILE [--dry-run]` replaces them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("team")
        actions = parser.add_subparsers(dest="action", required=True, metavar="export|apply")
        actions.add_parser("export", help="print the team's rule set as YAML")
        apply = actions.add_parser("apply", help="replace the team's whole set with FILE's (- for stdin)")
        apply.add_argument("file")
        apply.add_argument(
            "--dry-run", action="store_true", help="print the diff and the test against history; save nothing"
        )

    def handle(self, *args: Any, team: str, action: str, **options: Any) -> None:
        found = Team.objects.filter(slug=team).first() if team.isprintable() and len(team) <= 64 else None
        if found is None:
            raise CommandError(f"No team {team!r}.")
        version, rules = rules_current(found)
        current = [rule_shape(rule) for rule in rules]
        if action == "export":
            self.stdout.write(set_to_yaml(version, current, team=found.slug), ending="")
            return
        draft = self._read(options["file"])
        diff = rules_diff(current, draft)
        from policy.services import rules_validate

        problems = rules_validate(draft, team=found)
        if problems:
            raise CommandError(
                f"{options['file']}: nothing applied, {len(problems)} problem(s):\n"
                + "\n".join("  " + problem_line(problem) for problem in problems)
            )
        self.stdout.write(f"diff against version {version}: {diff.summary()}")
        if diff.text:
            self.stdout.write(diff.text, ending="" if diff.text.endswith("\n") else "\n")
        if options["dry_run"]:
            report = history_test(team=found, draft=draft, current=current)
            self.stdout.write(report_text(report.as_json()))
            self.stdout.write("dry run: nothing saved")
            return
        if diff.empty:
            self.stdout.write(f"no change: the set stays at version {version}")
            return
        try:
            made = rule_set_replace(team=found, rules=draft, actor=ACTOR, if_version=version, via="command")
        except RulesInvalid as invalid:
            raise CommandError(
                "nothing applied:\n" + "\n".join("  " + problem_line(problem) for problem in invalid.problems)
            ) from None
        except VersionMismatch:
            raise CommandError("nothing applied: the set changed while this ran; run it again") from None
        self.stdout.write(f"applied: version {made.version} of {found.slug}'s rules")

    def _read(self, path: str) -> list[Any]:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read {path}: {error}") from error
        try:
            return set_editable(set_from_text(text))
        except RulesFileInvalid as error:
            raise CommandError(f"{path}: nothing applied, {error}") from error
