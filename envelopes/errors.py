"""The agent side's own exceptions; the API maps each to problem+json with its `code`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import schema

if TYPE_CHECKING:
    from .models import Step


class HoldpointError(Exception):
    """An error the API answers as problem+json with a stable code."""

    status = 400
    code = "bad_request"
    title = "Bad request"

    def __init__(self, detail: str = "", **extra: Any) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.extra = extra


class StepNotFound(HoldpointError):
    status, code, title = 404, "not_found", "No such step"


class ToolNotFound(HoldpointError):
    status, code, title = 404, "not_found", "No such tool"


class ToolMismatch(HoldpointError):
    status, code, title = 409, "tool_mismatch", "The step belongs to another tool"


class ToolLimitReached(HoldpointError):
    status, code, title = 422, "tool_limit_reached", "The team has reached its tool limit"


class AttemptRefused(HoldpointError):
    status, title = 409, "Attempt refused"

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        step: Step | None,
        directive: dict,
        retry_after: datetime | None,
        rule: dict | None = None,
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.step = step
        self.directive = directive
        self.retry_after = retry_after
        self.rule = rule  # `rule: {name, version}` of a refusal by rule (§4 v1.2)


class EnvelopeInvalid(HoldpointError):
    status, title = 422, "The envelope breaks the contract"

    def __init__(self, rejected: schema.EnvelopeRejected) -> None:
        super().__init__(rejected.detail)
        self.code = rejected.code
        self.errors = [error.as_dict() for error in rejected.errors]


class InputInvalid(HoldpointError):
    """A tool call's input (the attempt gate's `input`, a reviewer's edited input) that cannot be
    accepted: `errors` names the field and the rule it broke."""

    status, code, title = 422, "schema_invalid", "The input breaks the contract"

    def __init__(self, detail: str, *, field: str, rule: str) -> None:
        super().__init__(detail, errors=[{"field": field, "rule": rule}])
        self.field = field
        self.rule = rule


class FingerprintMismatch(HoldpointError):
    """`input` does not hash to `input_fingerprint` (contract §4, Proposed input)."""

    status, code, title = 422, "fingerprint_mismatch", "The input does not match its fingerprint"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, errors=[{"field": "input_fingerprint", "rule": "matches_input"}])
