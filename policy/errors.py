"""The policy app's own exceptions (contract §11)."""

from __future__ import annotations

from typing import Any


class WhenInvalid(Exception):
    """A `when` that cannot be a rule's or a grant's: a syntax or type error, an unknown variable,
    a result that is not bool, or past a limit (its size, its cost). `position` is the 0-based
    character offset the CEL error names (None when it names none); `reason` says why."""

    def __init__(self, position: int | None, reason: str) -> None:
        super().__init__(reason if position is None else f"at {position}: {reason}")
        self.position = position
        self.reason = reason


class RulesInvalid(Exception):
    """A rule set refused whole: `problems` are `{field, rule, position, reason}` dicts, `field`
    naming the offending value (`rules[3].when`), `rule` the rule's name ("" when it has none)."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{p['field']}: {p['reason']}" for p in problems))
        self.problems = problems


class VersionMismatch(Exception):
    """The set changed since the version the caller read (`If-Match`): `current` is its version."""

    def __init__(self, current: int) -> None:
        super().__init__(f"The rule set is at version {current}.")
        self.current = current


class GrantRefused(Exception):
    """A grant that cannot be made: `field` and `rule` name why (`expires_in_s` past 7 days,
    `max_uses` outside 1..1000, a `when` that does not compile, a tool needing two approvals)."""

    def __init__(self, message: str, *, field: str, rule: str) -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule


class GrantNotFound(Exception):
    """No such grant in this team."""
