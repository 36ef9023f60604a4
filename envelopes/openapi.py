"""Response shapes of contract §4 as JSON Schema, for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse

from .lifecycle import State

_TIME = {"type": "string", "format": "date-time"}
_NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
_NULLABLE_STRING = {"type": ["string", "null"]}

DIRECTIVE: dict[str, Any] = {
    "type": "object",
    "required": ["action", "may_write", "not_before", "reason"],
    "properties": {
        "action": {"type": "string", "enum": ["proceed", "wait", "verify", "fix_input", "hold", "stop"]},
        "may_write": {"type": "boolean"},
        "not_before": _NULLABLE_TIME,
        "reason": {"type": "string"},
    },
}

LAST_ENVELOPE: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {
        "envelope_id": {"type": "integer"},
        "ok": {"type": "boolean"},
        "code": _NULLABLE_STRING,
        "category": _NULLABLE_STRING,
        "commit_state": _NULLABLE_STRING,
        "next_action": _NULLABLE_STRING,
        "scope": _NULLABLE_STRING,
        "resource_id": _NULLABLE_STRING,
        "safe_details": {"type": "object"},
        "occurred_at": _TIME,
    },
}

STEP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "operation_ref",
        "tool",
        "state",
        "held",
        "reason",
        "correlation_id",
        "run_id",
        "attempts",
        "max_attempts",
        "not_before",
        "deadline",
        "directive",
        "last_envelope",
        "decisions",
        "created_at",
        "updated_at",
        "url",
    ],
    "properties": {
        "operation_ref": {"type": "string"},
        "tool": {"type": "string"},
        "state": {"type": "string", "enum": [s.value for s in State]},
        "held": {"type": "boolean"},
        "reason": {"type": "string"},
        "correlation_id": _NULLABLE_STRING,
        "run_id": _NULLABLE_STRING,
        "attempts": {"type": "integer"},
        "max_attempts": {"type": "integer"},
        "not_before": _NULLABLE_TIME,
        "deadline": _NULLABLE_TIME,
        "directive": DIRECTIVE,
        "last_envelope": LAST_ENVELOPE,
        "decisions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "action": {"type": "string"},
                    "reviewer": {"type": "string"},
                    "reason": {"type": "string"},
                    "decided_at": _TIME,
                },
            },
        },
        "created_at": _TIME,
        "updated_at": _TIME,
        "url": {"type": "string", "format": "uri"},
    },
}

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "rule"],
                "properties": {"field": {"type": "string"}, "rule": {"type": "string"}, "allowed": {"type": "array"}},
            },
        },
        "step": STEP_SCHEMA,
        "directive": DIRECTIVE,
    },
}


def _json(schema: dict[str, Any], description: str) -> OpenApiResponse:
    return OpenApiResponse(response=schema, description=description)


def _problem(description: str) -> OpenApiResponse:
    return OpenApiResponse(response={"application/problem+json": PROBLEM_SCHEMA}, description=description)  # type: ignore[arg-type]


STEP = _json(STEP_SCHEMA, "The step")
STEP_ANSWER = _json(
    {"type": "object", "required": ["step", "directive"], "properties": {"step": STEP_SCHEMA, "directive": DIRECTIVE}},
    "The step and what the agent may do now",
)
INGEST_ANSWER = _json(
    {
        "type": "object",
        "required": ["envelope_id", "correlation_id", "step", "directive", "dropped_detail_keys", "flags"],
        "properties": {
            "envelope_id": {"type": "integer"},
            "correlation_id": {"type": "string"},
            "step": STEP_SCHEMA,
            "directive": DIRECTIVE,
            "dropped_detail_keys": {"type": "array", "items": {"type": "string"}},
            "flags": {
                "type": "array",
                "items": {"type": "string", "enum": ["redacted", "suspicious_text", "undocumented_code"]},
            },
        },
    },
    "Stored; the step and its directive",
)
ATTEMPT_GRANT = _json(
    {
        "type": "object",
        "required": ["attempt", "step", "directive"],
        "properties": {"attempt": {"type": "integer", "minimum": 1}, "step": STEP_SCHEMA, "directive": DIRECTIVE},
    },
    "The attempt is granted: write now",
)
REFUSAL = _problem("Refused: the problem's code says why; step and directive say what next")
STEP_LIST = _json(
    {
        "type": "object",
        "required": ["results", "next"],
        "properties": {"results": {"type": "array", "items": STEP_SCHEMA}, "next": {"type": ["string", "null"]}},
    },
    "A page of steps",
)
CODES = _json(
    {
        "type": "object",
        "required": ["tool", "codes"],
        "properties": {
            "tool": {"type": "string"},
            "codes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        key: {"type": "string"}
                        for key in (
                            "code",
                            "scope",
                            "category",
                            "retry_class",
                            "next_action",
                            "side_effect",
                            "description",
                            "hint",
                        )
                    },
                },
            },
        },
    },
    "The catalog",
)
SKIPPED = _json(
    {
        "type": "object",
        "required": ["run_id", "skipped"],
        "properties": {
            "run_id": {"type": "string"},
            "skipped": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "resource_id": {"type": "string"},
                        "correlation_id": {"type": "string"},
                        "code": {"type": "string"},
                        "operation_ref": {"type": "string"},
                        "occurred_at": _TIME,
                    },
                },
            },
        },
    },
    "Skipped resources",
)
PROBLEMS = {
    400: _problem("Malformed JSON"),
    401: _problem("No or unknown API key"),
    404: _problem("Not found in this team"),
    409: _problem("Conflict"),
    413: _problem("Body larger than 64 KiB"),
    422: _problem("The body breaks the schema or the contract"),
    429: _problem("Throttled; see Retry-After"),
}


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Documents `Authorization: Bearer hp_...` in the OpenAPI document."""

    target_class = "envelopes.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "hp_ API key"}
