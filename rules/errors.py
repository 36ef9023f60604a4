"""The rules API's own refusals (contract §11), answered as problem+json by the API's one
exception handler (envelopes.apikit.problems), like every HoldpointError."""

from __future__ import annotations

from typing import Any

from envelopes.errors import HoldpointError


class AdminRequired(HoldpointError):
    status, code, title = 403, "role_required", "Only the team's admins may change its rules and grants"


class RulesPreconditionRequired(HoldpointError):
    status, code, title = 428, "precondition_required", "If-Match with the rule set's ETag is required"


class RulesChanged(HoldpointError):
    """The set moved since the ETag the change was made on (someone saved first)."""

    status, code, title = 412, "rules_changed", "The rule set changed since that ETag"

    def __init__(self, detail: str, *, etag: str, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.headers = {"ETag": etag}


class RulesRefused(HoldpointError):
    """A rule set that breaks a rule: every problem at once, each naming its field
    (`rules[3].when`), the rule, and for CEL the position and the reason."""

    status, code, title = 422, "rules_invalid", "The rule set breaks a rule"

    def __init__(self, detail: str, *, errors: list[dict[str, Any]]) -> None:
        super().__init__(detail, errors=errors)
        self.errors = errors


class GrantRefused(HoldpointError):
    status, code, title = 422, "grant_invalid", "The grant breaks a rule"

    def __init__(self, detail: str, *, errors: list[dict[str, Any]]) -> None:
        super().__init__(detail, errors=errors)


class GrantNotFound(HoldpointError):
    status, code, title = 404, "not_found", "No such grant"
