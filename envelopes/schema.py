"""The envelope contract: parsing, dialects, consistency rules (CONTRACT.md section 2).

The JSON Schema dicts in `contract.py` are the single source of truth for the shapes; Python
adds what a schema cannot say readably: the consistency rules, the dialect normalisation, the
safe_details allowlist, redaction.
Pure Python, no Django, no database.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from hashlib import sha256
from typing import Any, cast

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from jsonschema.validators import extend

from envelopes.contract import (
    CATEGORIES,
    CODE_PATTERN,
    COMMIT_STATES,
    COMPACT_CATEGORIES,
    COMPACT_SCHEMA,
    DATE_TIME_PATTERN,
    DEFAULT_SAFE_DETAIL_KEYS,
    DIALECTS,
    ENVELOPE_SCHEMA,
    ERROR_ENVELOPE_SCHEMA,
    MAX_INT,
    MAX_SAFE_DETAILS,
    MCP_SCHEMA,
    MCP_WRAPPER_SCHEMA,
    NEXT_ACTIONS,
    PRINTABLE_PATTERN,
    RETRY_DIRECTIVES,
    SCOPES,
    SUCCESS_ENVELOPE_SCHEMA,
    TOOL_PATTERN,
    UNDECIDED_SCHEMA,
)
from envelopes.redaction import looks_like_instruction, redact_json

# The shapes are re-exported: callers use `schema.ENVELOPE_SCHEMA`, `schema.TOOL_PATTERN`, ...
__all__ = [
    "CATEGORIES",
    "CODE_PATTERN",
    "COMMIT_STATES",
    "COMPACT_CATEGORIES",
    "COMPACT_SCHEMA",
    "DATE_TIME_PATTERN",
    "DEFAULT_SAFE_DETAIL_KEYS",
    "DIALECTS",
    "ENVELOPE_SCHEMA",
    "ERROR_ENVELOPE_SCHEMA",
    "MAX_INT",
    "MAX_SAFE_DETAILS",
    "MCP_SCHEMA",
    "NEXT_ACTIONS",
    "PRINTABLE_PATTERN",
    "RETRY_DIRECTIVES",
    "SCOPES",
    "SUCCESS_ENVELOPE_SCHEMA",
    "TOOL_PATTERN",
    "EnvelopeRejected",
    "FieldError",
    "ParsedEnvelope",
    "ToolContext",
    "dialect_from_content_type",
    "identify",
    "parse_envelope",
    "parse_rfc3339",
    "safe_field_name",
    "time_window_error",
]

# How far from the time of receipt a time may lie. Beyond these a time is a client's bug (a clock
# at 1970, a "never" written as 9999-12-31), and the timers computed from it would overflow.
# `occurred_at` and `checked_at` are in the past, give or take clock skew; `not_before` may lie
# ahead, up to a year.
TIME_PAST_LIMIT = timedelta(days=3653)
TIME_FUTURE_LIMITS = {"not_before": timedelta(days=366)}
TIME_SKEW_LIMIT = timedelta(days=1)


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    # ECMA 262 `$` is the end of the input; Python's also matches before a final newline, which
    # would let "tool\n" through. `\Z` restores the ECMA meaning.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _pattern_keyword(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("date-time")
def _is_date_time(instance: object) -> bool:
    # The shape is the pattern's job (one error per problem); this catches 2026-02-30 and the like.
    if not isinstance(instance, str) or not _compiled(DATE_TIME_PATTERN).search(instance):
        return True
    return _parse_date_time(instance) is not None


def _parse_date_time(value: str) -> datetime | None:
    text = value.upper().replace("Z", "+00:00")
    if "." in text:  # Python keeps microseconds; RFC 3339 allows any precision.
        head, _, tail = text.partition(".")
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = f"{head}.{tail[: min(digits, 6)]}{tail[digits:]}"
    try:
        parsed = datetime.fromisoformat(text)
        return parsed.astimezone(UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        return None


_Validator = extend(Draft202012Validator, {"pattern": _pattern_keyword})  # type: ignore[no-untyped-call]
_ERROR_VALIDATOR = _Validator(ERROR_ENVELOPE_SCHEMA, format_checker=_FORMATS)
_SUCCESS_VALIDATOR = _Validator(SUCCESS_ENVELOPE_SCHEMA, format_checker=_FORMATS)
_UNDECIDED_VALIDATOR = _Validator(UNDECIDED_SCHEMA, format_checker=_FORMATS)
_COMPACT_VALIDATOR = _Validator(COMPACT_SCHEMA, format_checker=_FORMATS)
_MCP_VALIDATOR = _Validator(MCP_WRAPPER_SCHEMA, format_checker=_FORMATS)


class _Shape:
    """One shape of the contract with two validators compiled from the same schema dict.

    `jsonschema` (Python) is the reference: it names the errors, in the order the answer lists
    them. It also costs ~100-200 microseconds per envelope, most of an ingest's validation, while
    nearly every envelope is valid and has no errors to name. So `jsonschema_rs` (Rust, the same
    Draft 2020-12; ~2 microseconds, ~6 with the type walk below) answers "valid?" first, and the
    reference runs only when it says no. That is exact as long as the fast check never accepts
    what the reference rejects; where the two engines could differ it is made stricter, never
    looser:

    - `pattern`: the regex crate's `$` is the end of the input, as `_compiled`'s `\\Z` is, and
      its `\\uXXXX` classes are the same code points; lone surrogates (which Rust strings cannot
      hold) make it raise, and anything raised means "ask the reference".
    - `format: date-time` calls the reference's own checker (`_is_date_time`).
    - Types: Rust reads a tuple as an array and a Decimal as a number, which `jsonschema` does
      not; so only a body of plain `dict`/`list`/`str`/`int`/`float`/`bool`/`None` (`_plain_json`)
      goes to the fast check. A decoded JSON body is always plain.
    - Non-finite numbers: it refuses NaN and infinity, which the reference's `number` accepts
      (`_shape_errors` then rejects them in `safe_details` itself). Stricter costs only time.

    tests/envelopes/test_schema_fast.py holds the two to the same verdict on generated valid and
    broken envelopes of every shape."""

    def __init__(self, validator: Any) -> None:
        self.validator = validator
        self.fast = jsonschema_rs.Draft202012Validator(
            validator.schema,
            formats={"date-time": _is_date_time},
            validate_formats=True,
            # The regex crate: linear time, and no look-around (none of the contract's patterns
            # has any).
            pattern_options=jsonschema_rs.RegexOptions(),
        )

    def is_valid(self, body: dict[str, Any]) -> bool:
        """True only when the reference would find no error; False also when the fast check
        cannot decide."""
        if not _plain_json(body):
            return False
        try:
            return self.fast.is_valid(body)
        except Exception:  # whatever it cannot read (a lone surrogate...), the reference decides
            return False


_ERROR_SHAPE = _Shape(_ERROR_VALIDATOR)
_SUCCESS_SHAPE = _Shape(_SUCCESS_VALIDATOR)
_UNDECIDED_SHAPE = _Shape(_UNDECIDED_VALIDATOR)
_COMPACT_SHAPE = _Shape(_COMPACT_VALIDATOR)
_MCP_SHAPE = _Shape(_MCP_VALIDATOR)

_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain_json(body: dict[str, Any]) -> bool:
    """Whether the body, `result` excepted (no shape constrains it), holds only plain JSON: `dict`
    with `str` keys, `list`, `str`, `int`, `float`, `bool`, `None`, no subclass, no tuple. This is
    what `json.loads` makes; anything else the two engines might read differently."""
    stack: list[Any] = [body]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            for key, item in value.items():
                if type(key) is not str:
                    return False
                if value is not body or key != "result":
                    stack.append(item)
        elif kind is list:
            stack.extend(value)
        elif kind not in _PLAIN_SCALARS:
            return False
    return True


@dataclass(frozen=True)
class FieldError:
    field: str
    rule: str
    allowed: tuple[Any, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"field": self.field, "rule": self.rule}
        if self.allowed is not None:
            answer["allowed"] = list(self.allowed)
        return answer


class EnvelopeRejected(Exception):
    """A payload that breaks the contract: 422 `schema_invalid` or `contradictory_envelope`.

    `tool` and `operation_ref` are whatever could be read validly, so the caller can escalate the
    step and quarantine the payload under the right tool."""

    def __init__(
        self,
        code: str,
        errors: Iterable[FieldError],
        *,
        tool: str | None = None,
        operation_ref: str | None = None,
        detail: str | None = None,
    ) -> None:
        self.code = code
        self.errors = tuple(errors)
        self.tool = tool
        self.operation_ref = operation_ref
        if detail is None:
            named = ", ".join(f"{error.field} ({error.rule})" for error in self.errors[:8])
            more = f" and {len(self.errors) - 8} more" if len(self.errors) > 8 else ""
            verb = "contradicts itself" if code == "contradictory_envelope" else "breaks the schema"
            detail = f"The envelope {verb}: {named}{more}."
        self.detail = detail
        super().__init__(detail)


@dataclass(frozen=True)
class ToolContext:
    """What the compact dialect and the safe_details allowlist need from the tool and the step."""

    max_attempts: int = 3
    side_effects: bool = True
    attempts_so_far: int = 0
    safe_detail_keys: frozenset[str] = frozenset()
    default_backoff_ms: int = 1000


@dataclass(frozen=True)
class ParsedEnvelope:
    dialect: str
    ok: bool
    tool: str
    operation_ref: str
    correlation_id: str | None
    run_id: str | None
    attempt: int | None
    occurred_at: datetime
    code: str | None
    category: str | None
    commit_state: str
    retry_directive: str | None
    not_before: datetime | None
    max_attempts_remaining: int | None
    next_action: str | None
    scope: str | None
    resource_id: str | None
    safe_details: dict[str, str | int | float | bool] = field(default_factory=dict)
    dropped_detail_keys: tuple[str, ...] = ()
    agent_message: str = ""
    user_message: str = ""
    verification: dict[str, str | None] | None = None
    result_sha256: str | None = None
    result_size: int | None = None
    flags: frozenset[str] = frozenset()
    redaction_kinds: tuple[str, ...] = ()


def dialect_from_content_type(content_type: str) -> str:
    """`application/json; profile="compact"` -> `compact`; no profile -> `canonical`. The media
    type itself is the request parser's business (415), not this function's."""
    profile: str | None = None
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "profile":
            profile = value.strip().strip('"').strip().lower()
    if profile is None:
        return "canonical"
    if profile in DIALECTS:
        return profile
    raise EnvelopeRejected(
        "schema_invalid",
        (FieldError("Content-Type", "enum", DIALECTS),),
        detail=f"Unknown envelope profile; expected one of {', '.join(DIALECTS)}.",
    )


def identify(payload: Any, dialect: str) -> tuple[str | None, str | None]:
    """The (tool, operation_ref) that can be read validly, without validating the rest."""
    body = payload
    if dialect == "mcp" and isinstance(payload, dict):
        body = payload.get("structuredContent")
    if not isinstance(body, dict):
        return None, None
    tool, operation_ref = body.get("tool"), body.get("operation_ref")
    valid_tool = isinstance(tool, str) and _compiled(TOOL_PATTERN).search(tool) is not None
    return (tool if valid_tool else None), (operation_ref if _is_identifier(operation_ref) else None)


def _is_identifier(value: object) -> bool:
    return (
        isinstance(value, str)
        and 1 <= len(value) <= 200
        and _compiled(PRINTABLE_PATTERN).search(value) is not None
        and not _has_unprintable(value)
    )


_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _has_unprintable(value: str) -> bool:
    return not value.isprintable() and any(unicodedata.category(c) in _UNPRINTABLE for c in value)


def parse_envelope(payload: Any, *, dialect: str, context: ToolContext, received_at: datetime) -> ParsedEnvelope:
    """Validate, normalise and sanitise one envelope; raise `EnvelopeRejected` if it breaks the
    contract (shape errors win over contradictions)."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    if received_at.tzinfo is None:
        raise ValueError("received_at must be timezone-aware")
    tool, operation_ref = identify(payload, dialect)

    def reject(code: str, errors: list[FieldError], detail: str | None = None) -> EnvelopeRejected:
        ordered = sorted(set(errors), key=lambda e: (e.field, e.rule))
        return EnvelopeRejected(code, ordered, tool=tool, operation_ref=operation_ref, detail=detail)

    if dialect == "mcp":
        envelope, errors = _unwrap_mcp(payload)
    elif dialect == "compact":
        errors = _shape_errors(_COMPACT_SHAPE, payload)
        envelope = _normalise_compact(payload, context, received_at) if not errors else {}
    else:
        envelope, errors = payload, _canonical_shape_errors(payload)
    if not errors:
        errors, reasons = _time_errors(envelope, received_at)
        if errors:
            raise reject("schema_invalid", errors, f"A time of the envelope is out of bounds: {'; '.join(reasons)}.")
    result: bytes | None = None
    if not errors and "result" in envelope:
        try:
            result = _canonical_json(envelope["result"])
        except (RecursionError, TypeError, ValueError):
            errors = [FieldError("result", "maxDepth")]
    if errors:
        raise reject("schema_invalid", errors)

    contradictions, reasons = _contradictions(envelope)
    subject = "The envelope"
    if dialect == "compact":
        contradictions = [
            FieldError("retryable" if e.field in _FROM_RETRYABLE else e.field, e.rule) for e in contradictions
        ]
        subject = "The compact envelope, once normalised,"
    if dialect == "mcp" and payload.get("isError", False) is envelope["ok"]:
        contradictions.append(FieldError("isError", "mismatch"))
        reasons.append("isError must be the opposite of structuredContent.ok")
    if contradictions:
        detail = f"{subject} contradicts itself: {'; '.join(reasons)}."
        raise reject("contradictory_envelope", contradictions, detail)
    return _build(envelope, dialect, context, received_at, result)


def time_window_error(name: str, value: datetime, now: datetime) -> str | None:
    """Why the time `value` of field `name` is out of bounds (None: within them)."""
    future = TIME_FUTURE_LIMITS.get(name.rpartition(".")[2], TIME_SKEW_LIMIT)
    if value < now - TIME_PAST_LIMIT:
        return f"{name} lies more than {TIME_PAST_LIMIT.days} days in the past"
    if value > now + future:
        return f"{name} lies more than {future.days} day{'s' if future.days != 1 else ''} in the future"
    return None


def _time_errors(envelope: Mapping[str, Any], received_at: datetime) -> tuple[list[FieldError], list[str]]:
    """The times of a shape-valid envelope that are out of bounds (TIME_PAST_LIMIT...), and why."""
    retry, verification = envelope.get("retry") or {}, envelope.get("verification") or {}
    times = {
        "occurred_at": envelope.get("occurred_at"),
        "retry.not_before": retry.get("not_before"),
        "verification.checked_at": verification.get("checked_at"),
    }
    errors: list[FieldError] = []
    reasons: list[str] = []
    for name, value in times.items():
        reason = time_window_error(name, _as_datetime(value), received_at) if value is not None else None
        if reason is not None:
            errors.append(FieldError(name, "time_window"))
            reasons.append(reason)
    return errors, reasons


def _canonical_shape_errors(body: Any) -> list[FieldError]:
    ok = body.get("ok") if isinstance(body, dict) else None
    shape = _ERROR_SHAPE if ok is False else _UNDECIDED_SHAPE
    return _shape_errors(_SUCCESS_SHAPE if ok is True else shape, body)


def _unwrap_mcp(payload: Any) -> tuple[dict[str, Any], list[FieldError]]:
    errors = _shape_errors(_MCP_SHAPE, payload, envelope=False)
    inner = payload.get("structuredContent") if isinstance(payload, dict) else None
    if isinstance(inner, dict):
        errors += _canonical_shape_errors(inner)
        return inner, errors
    return {}, errors


def _shape_errors(shape: _Shape, body: Any, *, envelope: bool = True) -> list[FieldError]:
    if not isinstance(body, dict):
        return [FieldError("body", "type")]
    errors: list[FieldError] = []
    if not shape.is_valid(body):
        errors = [e for error in shape.validator.iter_errors(body) for e in _field_errors(error)]
    if not envelope:
        return errors
    # What the portable pattern cannot say: every unprintable category, for every identifier.
    for name in ("operation_ref", "correlation_id", "run_id", "resource_id"):
        value = body.get(name)
        if isinstance(value, str) and _has_unprintable(value):
            errors.append(FieldError(name, "pattern"))
    details = body.get("safe_details")
    if isinstance(details, dict):
        for key, value in details.items():
            if isinstance(value, float) and not math.isfinite(value):  # JSON has no NaN
                errors.append(FieldError(_path(["safe_details", key]), "type"))
    return errors


def _field_errors(error: ValidationError) -> Iterator[FieldError]:
    path = list(error.absolute_path)
    keyword = str(error.validator)
    instance, value = error.instance, cast(Any, error.validator_value)
    if keyword == "required" and isinstance(instance, dict):
        for name in value:
            if name not in instance:
                yield FieldError(_path([*path, name]), "required")
    elif keyword == "additionalProperties" and isinstance(instance, dict):
        known = cast(Mapping[str, Any], error.schema).get("properties", {})
        for name in instance:
            if name not in known:
                yield FieldError(_path([*path, name]), "additionalProperties")
    elif keyword in ("enum", "const"):
        yield FieldError(_path(path), "enum", tuple(value) if keyword == "enum" else (value,))
    else:
        yield FieldError(_path(path), keyword)


def _path(parts: list[Any]) -> str:
    """Dotted field name; names the sender chose are redacted and shortened, since they are
    echoed back and stored with the quarantined payload."""
    if not parts:
        return "body"
    return ".".join(safe_field_name(part) for part in parts)


def safe_field_name(name: object) -> str:
    """A field name the sender chose, as it may be echoed in an answer and stored: redacted, on
    one line, without NUL or lone surrogates, at most 100 characters."""
    # One line, storable (no NUL, no lone surrogates): anything invisible is escaped.
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in str(name))
    text = redact_json(text)[0]
    return text if len(text) <= 100 else text[:99] + "…"


def _canonical_json(value: Any) -> bytes:
    # Lone surrogates (legal in a JSON string escape, not in UTF-8) pass through rather than fail.
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _normalise_compact(body: Mapping[str, Any], context: ToolContext, received_at: datetime) -> dict[str, Any]:
    """The compact shape as a canonical error envelope (contract section 2, Dialects)."""
    if body["retryable"]:
        delay_ms = body.get("retry_after_ms", context.default_backoff_ms)
        retry = {
            "directive": "after_delay",
            "not_before": received_at + timedelta(milliseconds=delay_ms),
            "max_attempts_remaining": max(0, context.max_attempts - context.attempts_so_far),
        }
        next_action, default_commit_state = "wait_and_retry", "not_committed"
    else:
        retry = {"directive": "never", "max_attempts_remaining": 0}
        next_action = "escalate"
        default_commit_state = "unknown" if context.side_effects else "not_committed"
    envelope = {
        "ok": False,
        "code": body["code"],
        "category": COMPACT_CATEGORIES[body["category"]],
        "commit_state": body.get("commit_state", default_commit_state),
        "retry": retry,
        "next_action": next_action,
        "occurred_at": received_at,
    }
    for name in ("tool", "operation_ref", "correlation_id", "run_id", "scope", "resource_id"):
        if name in body:
            envelope[name] = body[name]
    return envelope


# In the compact dialect the retry fields and next_action all come from `retryable`.
_FROM_RETRYABLE = {
    "retry.directive",
    "retry.not_before",
    "retry.max_attempts_remaining",
    "next_action",
}


# Contract section 2, "Consistency rules": when `field` has one of `values`, `then` must have one
# of `then_values` (None: must be present).
_CONSISTENCY_RULES: tuple[tuple[str, tuple[str, ...], str, tuple[Any, ...] | None], ...] = (
    ("commit_state", ("unknown",), "retry.directive", ("never",)),
    ("commit_state", ("unknown",), "next_action", ("verify_operation", "escalate")),
    ("next_action", ("wait_and_retry",), "retry.directive", ("after_delay",)),
    ("next_action", ("wait_and_retry",), "retry.not_before", None),
    ("next_action", ("wait_and_retry",), "commit_state", ("not_committed",)),
    ("next_action", ("correct_input",), "retry.directive", ("after_input_fix",)),
    ("next_action", ("correct_input",), "commit_state", ("not_committed",)),
    ("retry.directive", ("never",), "retry.max_attempts_remaining", (0,)),
    ("scope", ("resource",), "resource_id", None),
    ("commit_state", ("committed",), "retry.directive", ("never",)),
    ("next_action", ("request_approval",), "commit_state", ("not_committed",)),
)


def _contradictions(envelope: Mapping[str, Any]) -> tuple[list[FieldError], list[str]]:
    """The broken consistency rules: one FieldError per field involved, one reason per rule."""
    if envelope.get("ok") is not False:
        return [], []
    retry = envelope["retry"]
    values = {
        "commit_state": envelope["commit_state"],
        "next_action": envelope["next_action"],
        "scope": envelope.get("scope", "request"),
        "resource_id": envelope.get("resource_id"),
        "retry.directive": retry["directive"],
        "retry.not_before": retry.get("not_before"),
        "retry.max_attempts_remaining": retry["max_attempts_remaining"],
    }
    errors: list[FieldError] = []
    reasons: list[str] = []
    for when, when_values, then, then_values in _CONSISTENCY_RULES:
        if values[when] not in when_values:
            continue
        if values[then] in then_values if then_values is not None else values[then]:
            continue
        errors += [FieldError(when, "consistency"), FieldError(then, "consistency")]
        wanted = " or ".join(map(str, then_values)) if then_values is not None else "set"
        reasons.append(f"{when} {values[when]} requires {then} {wanted}")
    return errors, reasons


# Texts in which `_sanitised` found nothing to redact, with what it answered: an agent sends the
# same few messages and detail values over and over (one per error code and field), and redacting
# one costs ~20 microseconds whatever its length, since every rule's finder looks at it. A text
# that held a secret is never kept, so that no secret outlives its request here. Bounded: at most
# this many texts of at most MAX_LENGTH characters (a few MB at worst), emptied when full.
_CLEAN_TEXTS: dict[str, tuple[str, bool]] = {}
_CLEAN_TEXTS_MAX = 512
_CLEAN_TEXT_MAX_LENGTH = 1000


def _sanitised(text: str) -> tuple[str, tuple[str, ...], bool]:
    """Untrusted text as it may be stored, the secret kinds found in it, and whether it reads
    like an instruction. A pure function of `text`, so a text found clean is answered from
    `_CLEAN_TEXTS` next time."""
    known = _CLEAN_TEXTS.get(text)
    if known is not None:
        return known[0], (), known[1]
    storable = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be stored
    instruction = looks_like_instruction(storable)
    # As a JSON value: a message that holds JSON, or JSON escapes (`postgres:\\/\\/…`), is
    # redacted as what a reader decodes.
    redacted, found = redact_json(storable)
    if not found and len(text) <= _CLEAN_TEXT_MAX_LENGTH:
        if len(_CLEAN_TEXTS) >= _CLEAN_TEXTS_MAX:
            _CLEAN_TEXTS.clear()
        _CLEAN_TEXTS[text] = (str(redacted), instruction)
    return str(redacted), found, instruction


def _build(
    envelope: Mapping[str, Any],
    dialect: str,
    context: ToolContext,
    received_at: datetime,
    result: bytes | None,
) -> ParsedEnvelope:
    kinds: set[str] = set()
    suspicious: list[bool] = []

    def clean(text: str) -> str:
        stored, found, instruction = _sanitised(text)
        suspicious.append(instruction)
        kinds.update(found)
        return stored

    safe_details: dict[str, str | int | float | bool] = {}
    dropped: list[str] = []
    allowlist = DEFAULT_SAFE_DETAIL_KEYS | context.safe_detail_keys
    for key, value in envelope.get("safe_details", {}).items():
        if key in allowlist:
            safe_details[key] = clean(value) if isinstance(value, str) else value
        else:  # never stored, but a name can hold a secret too, and it is echoed back
            suspicious.append(isinstance(value, str) and looks_like_instruction(value))
            dropped.append(clean(key))
    verification = envelope.get("verification")
    if verification is not None:
        evidence_ref = verification.get("evidence_ref")
        verification = {
            "checked_at": _as_datetime(verification["checked_at"]).isoformat(),
            "evidence_ref": clean(evidence_ref) if evidence_ref is not None else None,
        }
    ok, retry = envelope["ok"], envelope.get("retry", {})
    attempt, resource_id = envelope.get("attempt"), envelope.get("resource_id")
    remaining, not_before = retry.get("max_attempts_remaining"), retry.get("not_before")
    agent_message = clean(envelope.get("agent_message", ""))
    user_message = clean(envelope.get("user_message", ""))
    resource_id = clean(resource_id) if resource_id is not None else None
    flags = {"redacted"} if kinds else set()
    return ParsedEnvelope(
        dialect=dialect,
        ok=ok,
        tool=envelope["tool"],
        operation_ref=envelope["operation_ref"],
        correlation_id=envelope.get("correlation_id"),
        run_id=envelope.get("run_id"),
        attempt=int(attempt) if attempt is not None else None,
        occurred_at=_as_datetime(envelope.get("occurred_at", received_at)),
        code=envelope.get("code"),
        category=envelope.get("category"),
        commit_state=envelope["commit_state"],
        retry_directive=retry.get("directive"),
        not_before=_as_datetime(not_before) if not_before is not None else None,
        max_attempts_remaining=int(remaining) if remaining is not None else None,
        next_action=envelope.get("next_action"),
        scope=None if ok else envelope.get("scope", "request"),
        resource_id=resource_id,
        safe_details=safe_details,
        dropped_detail_keys=tuple(sorted(dropped)),
        agent_message=agent_message,
        user_message=user_message,
        verification=verification,
        result_sha256=sha256(result).hexdigest() if result is not None else None,
        result_size=len(result) if result is not None else None,
        flags=frozenset(flags | {"suspicious_text"} if any(suspicious) else flags),
        redaction_kinds=tuple(sorted(kinds)),
    )


def _as_datetime(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    parsed = _parse_date_time(value)
    if parsed is None:  # the schema's format check ran first; this is a programming error
        raise ValueError(f"not an RFC 3339 date-time: {value!r}")
    return parsed


def parse_rfc3339(value: str) -> datetime | None:
    """An RFC 3339 time with an offset, in UTC; None when the text is not one."""
    return _parse_date_time(value)
