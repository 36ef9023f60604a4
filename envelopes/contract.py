"""The envelope's shapes as plain JSON Schema (CONTRACT.md section 2).

They are the single source of truth: `schema/` validates with them, and the OpenAPI
document publishes them, so they stay plain JSON.
"""

from __future__ import annotations

from typing import Any

DIALECTS = ("canonical", "compact", "mcp")
CATEGORIES = ("validation", "authorization", "conflict", "dependency", "rate_limit", "internal")
COMMIT_STATES = ("not_committed", "committed", "unknown")
RETRY_DIRECTIVES = ("never", "after_delay", "after_input_fix")
NEXT_ACTIONS = (
    "correct_input", "wait_and_retry", "verify_operation", "request_approval", "escalate", "abort",
)  # fmt: skip
SCOPES = ("request", "resource", "service")
COMPACT_CATEGORIES = {
    "rate_limit": "rate_limit", "validation": "validation", "auth": "authorization",
    "upstream": "dependency", "conflict": "conflict", "internal": "internal",
}  # fmt: skip
DEFAULT_SAFE_DETAIL_KEYS = frozenset(
    {
        "field", "allowed_values", "expected_format", "received_type", "retry_after",
        "resource_version", "verification_tool", "limit", "constraint", "suggestion",
    }
)  # fmt: skip
MAX_SAFE_DETAILS = 32

TOOL_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
CODE_PATTERN = r"^[A-Z][A-Z0-9_]{1,63}$"
# RFC 3339 `date-time`, offset required; the calendar (2026-02-30) is checked by a real parse.
DATE_TIME_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)"
    r"(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
)
# C0/C1 controls and the common invisible format characters; `_has_unprintable` completes this
# with every Cc/Cf/Zl/Zp/Cs character (the pattern stays portable to ECMA 262 for OpenAPI).
PRINTABLE_PATTERN = (
    r"^[^\u0000-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E"
    r"\u2060-\u206F\uFEFF\uFFF9-\uFFFB]*$"
)
# Postgres `integer`: counts and delays beyond it are nonsense, and would overflow a column or a
# datetime.
MAX_INT = 2_147_483_647

_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _closed(properties: dict[str, Any], required: list[str], **extra: Any) -> dict[str, Any]:
    """An object schema that rejects unknown fields: every fixed object in the contract is one."""
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
        **extra,
    }


_IDENTIFIER = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": PRINTABLE_PATTERN}
_DATE_TIME = {"type": "string", "pattern": DATE_TIME_PATTERN, "format": "date-time"}
_TOOL = {"type": "string", "pattern": TOOL_PATTERN}
_CODE = {"type": "string", "pattern": CODE_PATTERN}
_COMMON = {
    "tool": _TOOL,
    "operation_ref": _IDENTIFIER,
    "correlation_id": _IDENTIFIER,
    "run_id": _IDENTIFIER,
    "attempt": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
    "occurred_at": _DATE_TIME,
}
# Enums carry no `type`: a wrong value is one `enum` error naming the allowed values.
_RETRY = _closed(
    {
        "directive": {"enum": list(RETRY_DIRECTIVES)},
        "not_before": _DATE_TIME,
        "max_attempts_remaining": {"type": "integer", "minimum": 0, "maximum": MAX_INT},
    },
    ["directive", "max_attempts_remaining"],
    **{
        "if": {"properties": {"directive": {"const": "after_delay"}}, "required": ["directive"]},
        "then": {"required": ["not_before"]},
    },
)
_ERROR_FIELDS = {
    "code": _CODE,
    "category": {"enum": list(CATEGORIES)},
    "commit_state": {"enum": list(COMMIT_STATES)},
    "retry": _RETRY,
    "next_action": {"enum": list(NEXT_ACTIONS)},
    "scope": {"enum": list(SCOPES), "default": "request"},
    "resource_id": _IDENTIFIER,
    "safe_details": {  # a free-form map by design, so the one object that is not closed
        "type": "object",
        "maxProperties": MAX_SAFE_DETAILS,
        "additionalProperties": {"type": ["string", "number", "boolean"], "maxLength": 500},
    },
    "agent_message": {"type": "string", "maxLength": 1000},
    "user_message": {"type": "string", "maxLength": 500},
}
_VERIFICATION = _closed(
    {"checked_at": _DATE_TIME, "evidence_ref": {"type": "string", "maxLength": 200}},
    ["checked_at"],
)
_SUCCESS_FIELDS = {
    "commit_state": {"enum": ["committed"]},
    "verification": _VERIFICATION,
    "result": {},
}
_ERROR_REQUIRED = [
    "ok", "tool", "operation_ref", "code", "category", "commit_state", "retry", "next_action",
]  # fmt: skip
ERROR_ENVELOPE_SCHEMA = _closed(
    {"ok": {"const": False}, **_COMMON, **_ERROR_FIELDS}, _ERROR_REQUIRED, title="Error envelope"
)
SUCCESS_ENVELOPE_SCHEMA = _closed(
    {"ok": {"const": True}, **_COMMON, **_SUCCESS_FIELDS},
    ["ok", "tool", "operation_ref", "commit_state"],
    title="Success envelope",
)
ENVELOPE_SCHEMA: dict[str, Any] = {
    "$schema": _SCHEMA_DIALECT,
    "title": "Holdpoint envelope",
    "oneOf": [ERROR_ENVELOPE_SCHEMA, SUCCESS_ENVELOPE_SCHEMA],
}
# The seed's compact shape plus the contract's fields. Its `code` is an enum of six values in the
# seed, but the contract's rule for `code` is the pattern: any stable code is accepted (the tool's
# catalog, not this schema, says which codes are documented).
_COMPACT_FIELDS = {
    "code": _CODE,
    "category": {"enum": list(COMPACT_CATEGORIES)},
    "retryable": {"type": "boolean"},
    "retry_after_ms": {"type": "integer", "minimum": 0, "maximum": MAX_INT},
    "scope": {"enum": list(SCOPES)},
    "resource_id": _IDENTIFIER,
    "correlation_id": _IDENTIFIER,
    "tool": _TOOL,
    "operation_ref": _IDENTIFIER,
    "run_id": _IDENTIFIER,
    "commit_state": {"enum": list(COMMIT_STATES)},
}
_COMPACT_REQUIRED = [
    "code", "category", "retryable", "scope", "correlation_id", "tool", "operation_ref",
]  # fmt: skip
COMPACT_SCHEMA = _closed(
    _COMPACT_FIELDS, _COMPACT_REQUIRED, **{"$schema": _SCHEMA_DIALECT, "title": "Compact envelope"}
)
_MCP_FIELDS = {
    # Content blocks are MCP's business: any object with a `type`.
    "content": {"type": "array", "items": {"type": "object", "required": ["type"]}},
    "isError": {"type": "boolean", "default": False},
    "_meta": {"type": "object"},
}
# MCP `CallToolResult`; the envelope is `structuredContent`. An absent `isError` means false, as
# in MCP, so an error envelope must say `isError: true`.
MCP_SCHEMA = _closed(
    {**_MCP_FIELDS, "structuredContent": {"oneOf": ENVELOPE_SCHEMA["oneOf"]}},
    ["content", "structuredContent"],
    **{"$schema": _SCHEMA_DIALECT, "title": "MCP CallToolResult carrying an envelope"},
)
# Validated here in two steps (the wrapper, then the envelope) so that errors name envelope fields.
MCP_WRAPPER_SCHEMA = _closed(
    {**_MCP_FIELDS, "structuredContent": {"type": "object"}}, ["content", "structuredContent"]
)
# When `ok` is missing or not a boolean, neither branch applies: report `ok` and the common shape.
UNDECIDED_SCHEMA = _closed(
    {
        **_COMMON,
        **_ERROR_FIELDS,
        **_SUCCESS_FIELDS,
        "ok": {"type": "boolean"},
        "commit_state": {"enum": list(COMMIT_STATES)},
    },
    ["ok", "tool", "operation_ref"],
)
