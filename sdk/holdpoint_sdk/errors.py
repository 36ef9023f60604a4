"""Typed errors, built from Holdpoint's RFC 9457 problem+json answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from .types import Directive, Step


class HoldpointError(Exception):
    """Any failure of a Holdpoint API call.

    `code` is the stable code of the contract (`schema_invalid`, `tool_halted`, ...),
    `status` the HTTP status (None when no answer arrived), `errors` the field errors of a
    validation failure, `problem` the whole problem+json body."""

    def __init__(
        self,
        detail: str,
        *,
        code: str,
        status: int | None,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        self.status = status
        self.problem: dict[str, Any] = problem or {}
        raw_errors = self.problem.get("errors")
        self.errors: list[dict[str, Any]] = raw_errors if isinstance(raw_errors, list) else []
        self.retry_after = retry_after  # seconds, from Retry-After, when the answer had one

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code!r}, status={self.status!r}, detail={self.detail!r})"


class ValidationFailed(HoldpointError):
    """400, 413 or 422: the request broke the schema or a consistency rule (see `errors`)."""


class Unauthorized(HoldpointError):
    """401 or 403: no key, an unknown or a revoked key."""


class NotFound(HoldpointError):
    """404: no such step or tool in this key's team (another team's object is 404 too)."""


class Conflict(HoldpointError):
    """409 that is not an attempt-gate refusal (e.g. `tool_mismatch`)."""


# The attempt gate's refusal codes (contract §4).
REFUSAL_CODES = frozenset(
    {
        "verification_required",
        "already_committed",
        "identical_retry",
        "retry_not_before",
        "approval_pending",
        "approval_mismatch",
        "escalated",
        "step_closed",
        "tool_halted",
        "attempt_budget_exhausted",
    }
)


class AttemptRefused(Conflict):
    """The attempt gate said no: do not write. `directive` says what to do instead; `step`
    is None when the refusal created no step (a halted tool's first attempt)."""

    def __init__(
        self,
        detail: str,
        *,
        code: str,
        status: int | None,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail, code=code, status=status, problem=problem, retry_after=retry_after)
        step = self.problem.get("step")
        self.step: Step | None = cast("Step", step) if isinstance(step, dict) else None
        directive = self.problem.get("directive")
        if not isinstance(directive, dict):
            directive = {"action": "hold", "may_write": False, "not_before": None, "reason": code}
        self.directive: Directive = directive  # type: ignore[assignment]


class StepChanged(HoldpointError):
    """412 `step_changed` (reviewer API, contract §10): the step moved since the ETag the
    decision named; read it again and decide on what it is now."""


class Throttled(HoldpointError):
    """429: this key sent too many requests; `retry_after` says for how long to wait."""


class ServerError(HoldpointError):
    """5xx from Holdpoint."""


class HoldpointUnavailable(HoldpointError):
    """No answer from Holdpoint (connection refused, timeout, protocol error)."""


class ReportNotDelivered(HoldpointError):
    """The tool call ran but its envelope could not be posted.

    Post `envelope` again later with the same `idempotency_key`
    (`client.post_envelope(err.envelope, idempotency_key=err.idempotency_key)`): Holdpoint
    answers a replay with the stored answer, so a lost answer never records the call twice."""

    def __init__(
        self,
        cause: HoldpointError,
        *,
        envelope: dict[str, Any],
        idempotency_key: str,
        result: Any = None,
        error: BaseException | None = None,
    ) -> None:
        super().__init__(
            f"the tool call's envelope was not delivered: {cause.detail}",
            code=cause.code,
            status=cause.status,
            problem=cause.problem,
            retry_after=cause.retry_after,
        )
        self.envelope = envelope
        self.idempotency_key = idempotency_key
        self.result = result
        self.error = error


class ReceiptInvalid(HoldpointError):
    """The approval a granted attempt acts on has no receipt that verifies against Holdpoint's
    keys, or its receipt is for another step, tool, action or input (contract §13). The call
    was not made: nothing was written. `operation_ref` names the step."""

    def __init__(self, detail: str, *, operation_ref: str) -> None:
        super().__init__(detail, code="receipt_invalid", status=None)
        self.operation_ref = operation_ref


class ApprovedInputNotPassed(RuntimeError):
    """A reviewer approved an edited input, and the guarded call was not given it (a closure
    over the original input, say). Raised before the attempt gate is asked: nothing is granted,
    nothing runs. Pass the guard's input to the call: `guard.call(fn, guard.input)`."""


class DecisionTimeout(TimeoutError):
    """`wait_for_decision` gave up; `step` is the last state it read."""

    def __init__(self, message: str, *, step: Step | None) -> None:
        super().__init__(message)
        self.step = step


class WebhookVerificationError(ValueError):
    """A webhook whose signature, timestamp or headers do not check out."""


_BY_STATUS: dict[int, type[HoldpointError]] = {
    400: ValidationFailed,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    412: StepChanged,
    413: ValidationFailed,
    422: ValidationFailed,
    429: Throttled,
}


def error_from_problem(
    status: int, problem: dict[str, Any] | None, *, retry_after: float | None, fallback_detail: str
) -> HoldpointError:
    """The typed error for one error answer (problem+json, or anything else)."""
    body = problem or {}
    code = body.get("code") if isinstance(body.get("code"), str) else None
    detail = body.get("detail") or body.get("title") or fallback_detail
    if not isinstance(detail, str):
        detail = str(detail)
    if status == 409 and (isinstance(body.get("directive"), dict) or code in REFUSAL_CODES):
        return AttemptRefused(
            detail,
            code=code or "attempt_refused",
            status=status,
            problem=body,
            retry_after=retry_after,
        )
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else HoldpointError)
    return cls(detail, code=code or f"http_{status}", status=status, problem=body, retry_after=retry_after)


def names_input(error: ValidationFailed) -> bool:
    """A 422 about `input` itself (too large, too deep, not an object, or a v1 server that does
    not know the field), as opposed to `input_fingerprint` (a mismatch is never papered over)."""
    fields = [e.get("field") for e in error.errors if isinstance(e, Mapping)]
    return any(
        isinstance(name, str) and (name == "input" or name.startswith(("input.", "input/", "input[")))
        for name in fields
    )


def input_rules(error: ValidationFailed) -> str:
    rules = sorted({str(e.get("rule") or e.get("code") or "?") for e in error.errors if isinstance(e, Mapping)})
    return ", ".join(rules) or error.code
