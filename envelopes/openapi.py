"""Response shapes of contract §4 as JSON Schema, for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from .lifecycle import State
from .proposal import INPUT_MAX_BYTES, INPUT_MAX_DEPTH

REF_PARAMETER = OpenApiParameter(
    "ref", str, OpenApiParameter.PATH, description="The step's operation_ref, URL-encoded (run_81%2Fstep_4)."
)
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "Replays the stored answer for the same body (refusals included); 422 idempotency_key_reused for"
        " another body; 409 idempotency_request_in_flight, with Retry-After, while the first request runs."
    ),
)

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
        "input": {
            "type": "object",
            "description": (
                "Only after an approval with an edited input, until a granted attempt uses it: the input the"
                " reviewer approved. The agent must run exactly this input (its fingerprint is input_fingerprint)."
            ),
        },
        "input_fingerprint": {
            "type": "string",
            "description": "With `input`: the fingerprint the approval binds; the gate grants only this one.",
        },
    },
}

PROPOSAL: dict[str, Any] = {
    "type": ["object", "null"],
    "description": (
        "The input the next approval binds, as stored (redacted): the latest granted attempt's input, or the"
        " input of a request the gate refused with approval_mismatch (then `attempt` is null). Null when no"
        " attempt was ever granted."
    ),
    "required": ["attempt", "input_fingerprint", "input", "input_redacted", "proposed_at"],
    "properties": {
        "attempt": {"type": ["integer", "null"], "minimum": 1},
        "input_fingerprint": {"type": "string"},
        "input": {"type": ["object", "null"], "description": "Null: the agent sent no input with that request."},
        "input_redacted": {
            "type": "boolean",
            "description": "A secret was replaced by [REDACTED:<kind>]; a reviewer cannot edit such an input.",
        },
        "proposed_at": _TIME,
    },
}

RECEIPT = {
    "type": ["string", "null"],
    "description": "The decision's signed receipt (contract §13): a compact JWS, EdDSA (Ed25519) with `kid`, over "
    "{iss, team, operation_ref, tool, action, input_fingerprint, decided_by, decided_at, step_version}; "
    "its keys are at /.well-known/holdpoint/jwks.json. Null on decisions made before receipts.",
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
        "trace_id",
        "approvals_required",
        "approver_group",
        "attempts",
        "max_attempts",
        "not_before",
        "deadline",
        "directive",
        "last_envelope",
        "decisions",
        "proposal",
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
        "trace_id": {
            "type": ["string", "null"],
            "pattern": "^[0-9a-f]{32}$",
            "description": "The W3C trace id of the agent's latest call on the step that carried a traceparent (§13).",
        },
        "approvals_required": {
            "type": "integer",
            "minimum": 1,
            "maximum": 5,
            "description": "How many distinct eligible reviewers must approve the same input (§12).",
        },
        "approver_group": {
            "type": ["string", "null"],
            "description": "The reviewer group that alone may approve, reject or edit the step (§12), or null.",
        },
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
                    "input_fingerprint": {
                        "type": ["string", "null"],
                        "description": "The fingerprint an approval approved; null for other acts.",
                    },
                    "edited": {"type": "boolean", "description": "The reviewer approved an edited input."},
                    "decided_by": {
                        "type": "object",
                        "description": "Who decided (v1.2, §11): a reviewer, or a rule or grant.",
                        "properties": {
                            "kind": {"type": "string", "enum": ["reviewer", "rule", "grant"]},
                            "reviewer": _NULLABLE_STRING,
                            "rule": {"type": ["object", "null"]},
                            "grant": {"type": ["object", "null"]},
                        },
                    },
                    "on_behalf_of": {
                        "type": ["string", "null"],
                        "description": "The away member a delegate decided for (v1.2, §12), or null.",
                    },
                    "receipt": RECEIPT,
                },
            },
        },
        "proposal": PROPOSAL,
        "policy": {
            "type": ["object", "null"],
            "description": "The rule or grant that last held, refused or approved the step (v1.2, §11).",
            "properties": {
                "effect": {"type": "string", "enum": ["deny", "require_approval", "allow"]},
                "rule": {"type": ["object", "null"]},
                "grant": {"type": ["object", "null"]},
                "evaluated_at": _NULLABLE_TIME,
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
PROBLEM_MEDIA_TYPE = "application/problem+json"


def problem_responses(overrides: dict[int, OpenApiResponse] | None = None) -> dict[Any, OpenApiResponse]:
    """The error answers of an operation, documented as `application/problem+json` (PROBLEMS
    puts the media type inside an application/json schema), with `overrides` by status."""
    answers = {status: _problem_response(str(response.description)) for status, response in PROBLEMS.items()}
    answers |= overrides or {}
    return {(status, PROBLEM_MEDIA_TYPE): response for status, response in answers.items()}


def _problem_response(description: str, examples: list[OpenApiExample] | None = None) -> OpenApiResponse:
    return OpenApiResponse(response=PROBLEM_SCHEMA, description=description, examples=examples or [])


def _problem_example(name: str, code: str, detail: str, errors: list[dict[str, str]], summary: str) -> OpenApiExample:
    return OpenApiExample(
        name,
        summary=summary,
        value={
            "type": f"https://holdpoint.dev/problems/{code}",
            "title": "Unprocessable",
            "status": 422,
            "detail": detail,
            "code": code,
            "errors": errors,
        },
        response_only=True,
        status_codes=["422"],
        media_type=PROBLEM_MEDIA_TYPE,
    )


_TOOL_LIMIT = _problem_example(
    "tool_limit_reached",
    "tool_limit_reached",
    "This team already has 500 tools, the most that agents may register; 'tool_501' is not one of them.",
    [{"field": "tool", "rule": "tool_limit"}],
    "A new tool beyond HOLDPOINT_MAX_TOOLS_PER_TEAM (default 500): nothing is stored",
)
INGEST_PROBLEMS = problem_responses(
    {
        422: _problem_response(
            (
                "The body breaks the schema (`schema_invalid`; rules such as `required`, `enum`, `pattern` and"
                " `time_window`: a time more than 10 years in the past, or in the future beyond 1 day (366 days for"
                " retry.not_before)), contradicts itself (`contradictory_envelope`), uses an undocumented code on a"
                " strict tool (`undocumented_code`), names a tool beyond the team's limit (`tool_limit_reached`), or"
                " reuses an Idempotency-Key (`idempotency_key_reused`). A rejected body is quarantined."
            ),
            [
                _problem_example(
                    "time_window",
                    "schema_invalid",
                    "occurred_at lies more than 3653 days in the past.",
                    [{"field": "occurred_at", "rule": "time_window"}],
                    "A time out of bounds",
                ),
                _TOOL_LIMIT,
            ],
        ),
    }
)
ATTEMPT_PROBLEMS = problem_responses(
    {
        409: _problem_response("Refused: the problem's code says why; step and directive say what next"),
        422: _problem_response(
            (
                "`fingerprint_mismatch`: `input` does not hash to `input_fingerprint` (SHA-256 of its RFC 8785"
                " canonical form). `schema_invalid` naming `input`: not a JSON object (rule `type`), over"
                f" {INPUT_MAX_BYTES} bytes in canonical form (`max_bytes`), nested deeper than {INPUT_MAX_DEPTH}"
                " (`max_depth`), or without a canonical form, such as an integer beyond 2**53 (`canonical`). Also"
                " `tool_limit_reached` and `idempotency_key_reused`. Nothing is stored."
            ),
            [
                _problem_example(
                    "fingerprint_mismatch",
                    "fingerprint_mismatch",
                    "input_fingerprint is not the SHA-256 of the input's RFC 8785 canonical form.",
                    [{"field": "input_fingerprint", "rule": "matches_input"}],
                    "The input is not the one the fingerprint names",
                ),
                _problem_example(
                    "input_too_large",
                    "schema_invalid",
                    f"The input is 40112 bytes in canonical form; at most {INPUT_MAX_BYTES} are accepted.",
                    [{"field": "input", "rule": "max_bytes"}],
                    "An input over the limit",
                ),
                _TOOL_LIMIT,
            ],
        ),
    }
)
ATTEMPT_REQUEST_EXAMPLES = [
    OpenApiExample(
        "With the input",
        summary="The tool call's input, so that a reviewer reads what an approval binds",
        value={
            "tool": "issue_refund",
            "input_fingerprint": "5b1d6c9f3e0d2c8a7f4e6b1a9d3c5e7f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d",
            "input": {"amount": 120, "customer": "c_1", "order": "o_9"},
            "run_id": "run_7",
        },
        request_only=True,
    ),
    OpenApiExample(
        "Fingerprint only",
        summary="Without input everything works as in v1; the reviewer is told the agent sent none",
        value={
            "tool": "issue_refund",
            "input_fingerprint": "5b1d6c9f3e0d2c8a7f4e6b1a9d3c5e7f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d",
        },
        request_only=True,
    ),
]
STEP_EXAMPLE = OpenApiExample(
    "Approved with an edited input",
    summary="The directive carries the approved input until an attempt uses it",
    value={
        "operation_ref": "run_7/refund_1",
        "tool": "issue_refund",
        "state": "retry_ready",
        "held": False,
        "reason": "approved",
        "correlation_id": "c0ffee00-0000-4000-8000-000000000001",
        "run_id": "run_7",
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "attempts": 1,
        "max_attempts": 3,
        "not_before": None,
        "deadline": None,
        "directive": {
            "action": "proceed",
            "may_write": True,
            "not_before": None,
            "reason": "approved",
            "input": {"amount": 500, "customer": "c_1", "order": "o_9"},
            "input_fingerprint": "9f0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100",
        },
        "last_envelope": None,
        "decisions": [
            {
                "action": "approve",
                "reviewer": "rita",
                "reason": "capped at the limit",
                "decided_at": "2026-12-01T10:02:00Z",
                "input_fingerprint": "9f0e1d2c3b4a59687766554433221100ffeeddccbbaa99887766554433221100",
                "edited": True,
            }
        ],
        "proposal": {
            "attempt": 1,
            "input_fingerprint": "5b1d6c9f3e0d2c8a7f4e6b1a9d3c5e7f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d",
            "input": {"amount": 9000, "customer": "c_1", "order": "o_9"},
            "input_redacted": False,
            "proposed_at": "2026-12-01T10:00:00Z",
        },
        "created_at": "2026-12-01T10:00:00Z",
        "updated_at": "2026-12-01T10:02:00Z",
        "url": "http://localhost:8000/steps/1/",
    },
    response_only=True,
    status_codes=["200"],
)


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Documents `Authorization: Bearer hp_...` in the OpenAPI document."""

    target_class = "accounts.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "hp_ API key"}
