"""The envelope's shapes: the JSON Schema dicts of `contract.py`, compiled twice (`_Shape`), and
the field errors they name.

What the portable schema cannot say is said here too: every unprintable category in an
identifier, no NaN in `safe_details`. Pure Python, no Django.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from jsonschema.validators import extend

from envelopes.contract import (
    COMPACT_SCHEMA,
    DATE_TIME_PATTERN,
    ERROR_ENVELOPE_SCHEMA,
    MCP_WRAPPER_SCHEMA,
    PRINTABLE_PATTERN,
    SUCCESS_ENVELOPE_SCHEMA,
    TOOL_PATTERN,
    UNDECIDED_SCHEMA,
)
from envelopes.redaction import redact_json
from envelopes.rfc3339 import parse_rfc3339


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
    return parse_rfc3339(instance) is not None


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


def canonical_shape_errors(body: Any) -> list[FieldError]:
    """The shape errors of a canonical envelope: the success, error or undecided shape by `ok`."""
    ok = body.get("ok") if isinstance(body, dict) else None
    shape = _ERROR_SHAPE if ok is False else _UNDECIDED_SHAPE
    return _shape_errors(_SUCCESS_SHAPE if ok is True else shape, body)


def compact_shape_errors(body: Any) -> list[FieldError]:
    return _shape_errors(_COMPACT_SHAPE, body)


def mcp_wrapper_shape_errors(payload: Any) -> list[FieldError]:
    """The errors of the MCP wrapper itself; the envelope inside is checked as canonical."""
    return _shape_errors(_MCP_SHAPE, payload, envelope=False)


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


def as_datetime(value: str | datetime) -> datetime:
    """A time of a shape-valid envelope, in UTC."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    parsed = parse_rfc3339(value)
    if parsed is None:  # the schema's format check ran first; this is a programming error
        raise ValueError(f"not an RFC 3339 date-time: {value!r}")
    return parsed
