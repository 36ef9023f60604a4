"""Envelopes from tool results: the input fingerprint, and what a raised exception means.

Everything here is pure (no I/O), so the mapping from "what the tool call raised" to "what
Holdpoint is told" can be read, and tested, as a table:

| the call raised                                  | commit_state  | next_action              |
|--------------------------------------------------|---------------|--------------------------|
| `ToolError(failure)`                             | the failure's | the failure's            |
| httpx ConnectError, ConnectTimeout, PoolTimeout  | not_committed | wait_and_retry           |
| httpx ReadTimeout, WriteTimeout, other transport | unknown       | verify_operation (*)     |
| HTTP 429 (Retry-After -> absolute not_before)    | not_committed | wait_and_retry           |
| HTTP 408                                         | not_committed | wait_and_retry           |
| HTTP 401, 403                                    | not_committed | escalate (authorization) |
| HTTP 409                                         | not_committed | escalate (conflict)      |
| other 4xx whose JSON body names a field          | not_committed | correct_input (field)    |
| other 4xx                                        | not_committed | escalate (validation)    |
| HTTP 5xx                                         | unknown       | verify_operation (*)     |
| any other exception                              | unknown       | verify_operation (*)     |

A connect failure means the request never left this process; a transport error after that
means it was sent (or partly sent) and may have been written. The blamed field goes into
`safe_details.field`.

(*) for a tool without side effects (`side_effects=False`) nothing can have been written, so
these become `not_committed` / `wait_and_retry` (an unexpected exception: `escalate`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx
import rfc8785

Category = Literal["validation", "authorization", "conflict", "dependency", "rate_limit", "internal"]
CommitState = Literal["not_committed", "committed", "unknown"]
NextAction = Literal["correct_input", "wait_and_retry", "verify_operation", "request_approval", "escalate", "abort"]
Scope = Literal["request", "resource", "service"]
SafeValue = str | int | float | bool

DEFAULT_RETRY_DELAY = 30.0  # seconds, when a failure asks for a delay without saying how long
MAX_INPUT_BYTES = 32 * 1024  # the attempt gate's limit on `input`'s canonical form (contract §4)
_RETRY_DIRECTIVE = {"wait_and_retry": "after_delay", "correct_input": "after_input_fix"}


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def rfc3339(value: dt.datetime) -> str:
    if value.tzinfo is None:
        raise ValueError("times sent to Holdpoint carry an offset; got a naive datetime")
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_rfc3339(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- the input fingerprint -------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """The input as plain JSON values: datetimes, dates and times become ISO 8601 strings,
    Decimals and UUIDs strings, tuples lists; anything else without a JSON form is refused."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"cannot fingerprint a {type(key).__name__} key: JSON object keys are strings")
            out[key] = jsonable(item)
        return out
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"cannot fingerprint a {type(value).__name__}: pass JSON-compatible input")


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 (JCS) canonical form the fingerprint hashes, as UTF-8 bytes (computed by
    the `rfc8785` package): keys sorted by UTF-16 code units, no whitespace, numbers as
    ECMAScript prints them (`1e+21`, `0.1`, `-0.0` -> `0`).

    Python values without a JSON form are converted first (datetimes, dates and times to ISO
    8601 strings, Decimals and UUIDs to strings); NaN, infinities and integers beyond 2**53 are
    refused (ValueError), as are other types (TypeError)."""
    return rfc8785.dumps(jsonable(value))


def input_fingerprint(value: Any) -> str:
    """Lowercase hex SHA-256 of the RFC 8785 canonical JSON of a tool call's input (the attempt
    gate's `input_fingerprint`): the same input always gives the same fingerprint, here and on
    the server, which recomputes it from `input`."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


# --- failures -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """The error half of an envelope: what went wrong, and what may happen next.

    The retry directive follows from `next_action` (wait_and_retry -> after_delay,
    correct_input -> after_input_fix, anything else -> never), so a Failure always satisfies
    the contract's consistency rules when built with the constructors below."""

    code: str
    category: Category
    commit_state: CommitState
    next_action: NextAction
    not_before: dt.datetime | None = None
    scope: Scope = "request"
    resource_id: str | None = None
    safe_details: Mapping[str, SafeValue] = field(default_factory=dict)
    agent_message: str | None = None
    user_message: str | None = None

    @property
    def retry_directive(self) -> str:
        return _RETRY_DIRECTIVE.get(self.next_action, "never")

    def envelope(
        self,
        *,
        tool: str,
        operation_ref: str,
        attempts_remaining: int,
        occurred_at: dt.datetime,
        attempt: int | None = None,
        run_id: str | None = None,
        correlation_id: str | None = None,
    ) -> dict[str, Any]:
        """The canonical error envelope (contract §2) for this failure."""
        retry: dict[str, Any] = {"directive": self.retry_directive}
        if self.retry_directive == "never":
            retry["max_attempts_remaining"] = 0
        else:
            retry["max_attempts_remaining"] = max(0, attempts_remaining)
        if self.retry_directive == "after_delay":
            not_before = self.not_before or occurred_at + dt.timedelta(seconds=DEFAULT_RETRY_DELAY)
            retry["not_before"] = rfc3339(not_before)
        body: dict[str, Any] = {
            "ok": False,
            "tool": tool,
            "operation_ref": operation_ref,
            "code": self.code,
            "category": self.category,
            "commit_state": self.commit_state,
            "retry": retry,
            "next_action": self.next_action,
            "scope": self.scope,
            "safe_details": dict(self.safe_details),
            "occurred_at": rfc3339(occurred_at),
        }
        if self.resource_id is not None:
            body["resource_id"] = self.resource_id
        for key, value in (
            ("agent_message", self.agent_message),
            ("user_message", self.user_message),
            ("attempt", attempt),
            ("run_id", run_id),
            ("correlation_id", correlation_id),
        ):
            if value is not None:
                body[key] = value
        return body

    # Constructors for the common cases (seed scenarios).

    @classmethod
    def invalid_input(cls, code: str, *, field: str, **more: Any) -> Failure:
        details = {"field": field, **more.pop("safe_details", {})}
        return cls(code, "validation", "not_committed", "correct_input", safe_details=details, **more)

    @classmethod
    def retry_later(
        cls, code: str, *, not_before: dt.datetime, category: Category = "rate_limit", **more: Any
    ) -> Failure:
        return cls(code, category, "not_committed", "wait_and_retry", not_before=not_before, **more)

    @classmethod
    def outcome_unknown(cls, code: str = "OUTCOME_UNKNOWN", **more: Any) -> Failure:
        more.setdefault("category", "dependency")
        category = more.pop("category")
        return cls(code, category, "unknown", "verify_operation", **more)

    @classmethod
    def approval_required(cls, code: str, *, category: Category = "authorization", **more: Any) -> Failure:
        return cls(code, category, "not_committed", "request_approval", **more)

    @classmethod
    def service_outage(cls, code: str, *, not_before: dt.datetime, **more: Any) -> Failure:
        """The whole downstream service is down: Holdpoint halts the tool until not_before."""
        return cls(
            code,
            "dependency",
            "not_committed",
            "wait_and_retry",
            not_before=not_before,
            scope="service",
            **more,
        )

    @classmethod
    def escalate(
        cls,
        code: str,
        *,
        category: Category,
        commit_state: CommitState = "not_committed",
        **more: Any,
    ) -> Failure:
        return cls(code, category, commit_state, "escalate", **more)


class ToolError(Exception):
    """Raise from inside a guarded call to say exactly what failed (instead of the mapping
    from exceptions): `raise ToolError(Failure.invalid_input("BAD_EMAIL", field="to"))`."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.code)
        self.failure = failure


# --- mapping what a call raised -------------------------------------------------------------


def parse_retry_after(value: str | None, *, now: dt.datetime) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now).total_seconds())


_FIELD_KEYS = ("field", "param", "parameter", "property")
_NESTED_KEYS = (
    "error",
    "errors",
    "detail",
    "details",
    "invalid_params",
    "invalid-params",
    "violations",
)


def field_named_in(body: Any, _depth: int = 0) -> str | None:
    """The input field an error body blames, in the shapes common APIs use: `{"field": ..}`,
    Stripe's `{"error": {"param": ..}}`, RFC 9457 `invalid_params[].name`, FastAPI's
    `detail[].loc`, JSON:API `errors[].source.pointer`, Rails' `{"errors": {"email": [..]}}`."""
    if _depth > 4:
        return None
    if isinstance(body, list):
        for item in body[:10]:
            found = field_named_in(item, _depth + 1)
            if found:
                return found
        return None
    if not isinstance(body, dict):
        return None
    for key in _FIELD_KEYS:
        value = body.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    name = body.get("name")
    if _depth > 0 and isinstance(name, str) and name.strip() and ("reason" in body or "rule" in body):
        return name.strip()[:200]
    loc = body.get("loc")
    if isinstance(loc, list) and loc and isinstance(loc[-1], str | int):
        return str(loc[-1])[:200]
    source = body.get("source")
    if isinstance(source, dict) and isinstance(source.get("pointer"), str):
        pointer = str(source["pointer"]).rstrip("/").rsplit("/", 1)[-1]
        if pointer:
            return pointer[:200]
    for key in _NESTED_KEYS:
        nested = body.get(key)
        if key == "errors" and isinstance(nested, dict) and nested:
            first = next(iter(nested))
            if isinstance(first, str) and not isinstance(nested[first], dict):
                return first[:200]
        found = field_named_in(nested, _depth + 1)
        if found:
            return found
    return None


def _json_body(response: httpx.Response) -> Any:
    try:
        response.read()
        return response.json()
    except (ValueError, httpx.StreamError):
        return None


def _delay_failure(
    code: str,
    category: Category,
    *,
    not_before: dt.datetime,
    retry_after: float | None,
    message: str,
) -> Failure:
    details: dict[str, SafeValue] = {}
    if retry_after is not None:
        details["retry_after"] = int(retry_after)
    return Failure.retry_later(
        code, not_before=not_before, category=category, safe_details=details, agent_message=message
    )


_DELAY_CODES: dict[int, tuple[str, Category]] = {
    429: ("RATE_LIMITED", "rate_limit"),
    408: ("REQUEST_TIMEOUT", "dependency"),
}


def failure_for_response(
    response: httpx.Response,
    *,
    side_effects: bool = True,
    now: dt.datetime | None = None,
    default_delay: float = DEFAULT_RETRY_DELAY,
) -> Failure:
    """What an HTTP error answer of a downstream API means for the step."""
    now = now or now_utc()
    status = response.status_code
    message = f"HTTP {status} from the tool's service"
    if status in (429, 408) or (status >= 500 and not side_effects):
        retry_after = parse_retry_after(response.headers.get("Retry-After"), now=now)
        delay = retry_after if retry_after is not None else default_delay
        code, category = _DELAY_CODES.get(status, ("UPSTREAM_UNAVAILABLE", "dependency"))
        not_before = now + dt.timedelta(seconds=delay)
        return _delay_failure(code, category, not_before=not_before, retry_after=retry_after, message=message)
    if status >= 500:
        return Failure.outcome_unknown("UPSTREAM_ERROR", agent_message=message + "; it may have committed")
    if status in (401, 403):
        code = "UPSTREAM_UNAUTHORIZED" if status == 401 else "UPSTREAM_FORBIDDEN"
        return Failure.escalate(code, category="authorization", agent_message=message)
    if status == 409:
        return Failure.escalate("UPSTREAM_CONFLICT", category="conflict", agent_message=message)
    blamed = field_named_in(_json_body(response))
    if blamed:
        return Failure.invalid_input("INVALID_INPUT", field=blamed, agent_message=message)
    return Failure.escalate("REQUEST_REFUSED", category="validation", agent_message=message)


def failure_for_exception(
    error: BaseException,
    *,
    side_effects: bool = True,
    now: dt.datetime | None = None,
    default_delay: float = DEFAULT_RETRY_DELAY,
) -> Failure:
    """What an exception raised by a tool call means for the step (see the module's table)."""
    now = now or now_utc()
    name = type(error).__name__
    if isinstance(error, ToolError):
        return error.failure
    if isinstance(error, httpx.HTTPStatusError):
        return failure_for_response(error.response, side_effects=side_effects, now=now, default_delay=default_delay)
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        # The request never left this process: nothing can have been written.
        return _delay_failure(
            "UPSTREAM_UNREACHABLE",
            "dependency",
            not_before=now + dt.timedelta(seconds=default_delay),
            retry_after=None,
            message=f"{name}: the request was not sent",
        )
    if isinstance(error, httpx.TransportError):
        # Sent (or partly sent), then no answer: the write may have happened.
        if not side_effects:
            return _delay_failure(
                "UPSTREAM_TIMEOUT",
                "dependency",
                not_before=now + dt.timedelta(seconds=default_delay),
                retry_after=None,
                message=f"{name} after the request was sent",
            )
        return Failure.outcome_unknown(
            "OUTCOME_UNKNOWN",
            agent_message=f"{name} after the request was sent; it may have committed",
        )
    if not side_effects:
        return Failure.escalate("TOOL_EXCEPTION", category="internal", agent_message=f"{name} in the tool call")
    return Failure.outcome_unknown(
        "TOOL_EXCEPTION",
        category="internal",
        agent_message=f"{name} in the tool call; it may have committed",
    )


def success_envelope(
    *,
    tool: str,
    operation_ref: str,
    occurred_at: dt.datetime,
    result: Any = None,
    attempt: int | None = None,
    run_id: str | None = None,
    correlation_id: str | None = None,
    evidence_ref: str | None = None,
) -> dict[str, Any]:
    """The success envelope; `result` goes along only when it is JSON (Holdpoint keeps only
    its SHA-256 and size)."""
    body: dict[str, Any] = {
        "ok": True,
        "tool": tool,
        "operation_ref": operation_ref,
        "commit_state": "committed",
        "occurred_at": rfc3339(occurred_at),
    }
    if evidence_ref is not None:
        body["verification"] = {"checked_at": rfc3339(occurred_at), "evidence_ref": evidence_ref}
    if result is not None:
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError):
            pass
        else:
            body["result"] = result
    for key, value in (
        ("attempt", attempt),
        ("run_id", run_id),
        ("correlation_id", correlation_id),
    ):
        if value is not None:
            body[key] = value
    return body
