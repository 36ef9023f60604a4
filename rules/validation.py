"""A draft set checked by policy's own checks (the ones a save runs), as the API's errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accounts.models import Team
from policy.services import rules_validate

from .errors import RulesRefused


def problems_as_errors(problems: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """policy's problems as §4's `errors`: `field` (`rules[3].when`), `rule` the check broken (a
    stable code), `name` the rule's name, and `position` and `reason` for an expression."""
    errors = []
    for problem in problems:
        field = str(problem.get("field", "rules"))
        check = problem.get("code") or problem.get("check") or ("cel" if field.endswith(".when") else "invalid")
        entry: dict[str, Any] = {
            "field": field,
            "rule": check,
            "name": problem.get("rule"),
            "reason": problem.get("reason", ""),
        }
        if problem.get("position") is not None:
            entry["position"] = problem["position"]
        if problem.get("limit") is not None:
            entry["limit"] = problem["limit"]
        errors.append(entry)
    return errors


def problem_line(problem: dict[str, Any]) -> str:
    """One problem for a person: the rule, the field, the position and the reason."""
    name = f"rule {problem['rule']!r}, " if problem.get("rule") else ""
    at = f" at position {problem['position']}" if problem.get("position") is not None else ""
    return f"{name}{problem.get('field', 'rules')}{at}: {problem.get('reason', 'invalid')}"


def rules_checked(draft: list[Any], team: Team | None = None) -> list[Any]:
    """`draft` when policy would save it (for `team`: its groups too); RulesRefused naming every
    problem otherwise."""
    problems = rules_validate(draft, team=team)
    if problems:
        detail = problem_line(problems[0]) + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        raise RulesRefused(detail, errors=problems_as_errors(problems))
    return draft
