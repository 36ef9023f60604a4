"""The rules API's shapes for the OpenAPI document (contract §11)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from envelopes.openapi import PROBLEM_MEDIA_TYPE, PROBLEM_SCHEMA
from reviewers.openapi import IF_NONE_MATCH_PARAMETER, TEAM_PARAMETER

__all__ = ["IF_NONE_MATCH_PARAMETER", "TEAM_PARAMETER"]

_TIME = {"type": "string", "format": "date-time"}
_NAME = {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,63}$"}

RULE_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "tools", "when", "effect"],
    "properties": {
        "name": _NAME,
        "description": {"type": "string"},
        "tools": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": 'tool names, or ["*"]'},
        "when": {"type": "string", "maxLength": 2048, "description": "a CEL expression yielding bool (§11)"},
        "effect": {"type": "string", "enum": ["deny", "require_approval", "allow"]},
        "approvals": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
        "approvers": {"type": ["string", "null"], "description": "a reviewer group (§12), or null"},
        "mode": {"type": "string", "enum": ["enforce", "shadow"], "default": "enforce"},
        "enabled": {"type": "boolean", "default": True},
    },
}
RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        *RULE_INPUT_SCHEMA["required"],
        "approvals",
        "approvers",
        "mode",
        "enabled",
        "version",
        "updated_by",
        "updated_at",
    ],
    "properties": {
        **RULE_INPUT_SCHEMA["properties"],
        "version": {"type": "integer", "description": "+1 on every change of the rule"},
        "updated_by": {"type": "string"},
        "updated_at": _TIME,
    },
}
RULE_SET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["version", "rules"],
    "properties": {
        "version": {"type": "integer", "description": "the set's version (0 before its first change); the ETag"},
        "rules": {"type": "array", "items": RULE_SCHEMA, "maxItems": 200},
    },
}
RULE_SET = OpenApiResponse(
    response=RULE_SET_SCHEMA, description="The set, in evaluation order; the ETag header is its tag"
)
RULE_SET_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["rules"],
    "properties": {
        "version": {"type": "integer", "description": "ignored: If-Match names the version"},
        "rules": {
            "type": "array",
            "maxItems": 200,
            "items": {**RULE_INPUT_SCHEMA, "description": "version, updated_by and updated_at are ignored"},
        },
    },
}
RULE_SET_REQUEST = {"application/json": RULE_SET_BODY}

_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}
_EXAMPLE = {
    "type": "object",
    "properties": {
        "step_id": {"type": "integer"},
        "operation_ref": {"type": "string"},
        "tool": {"type": "string"},
        "attempt": {"type": "integer"},
        "granted_at": _TIME,
        "rule": {"type": ["string", "null"]},
    },
}
_SET_REPORT = {
    "type": "object",
    "properties": {
        "outcomes": {**_COUNTS, "description": "denied, held, allowed, granted (no rule acted)"},
        "shadow": {**_COUNTS, "description": "would_deny, would_hold, would_allow (shadow rules)"},
        "errors": {"type": "integer"},
        "by_rule": {"type": "object", "additionalProperties": _COUNTS},
        "examples": {"type": "object", "additionalProperties": {"type": "array", "items": _EXAMPLE, "maxItems": 20}},
    },
}
HISTORY_REPORT = OpenApiResponse(
    response={
        "type": "object",
        "required": ["since", "until", "tools", "attempts", "capped", "draft", "current", "changes"],
        "properties": {
            "since": _TIME,
            "until": _TIME,
            "tools": {"type": "array", "items": {"type": "string"}},
            "attempts": {"type": "integer", "description": "attempts evaluated (at most attempts_cap)"},
            "attempts_cap": {"type": "integer"},
            "capped": {"type": "boolean"},
            "draft": _SET_REPORT,
            "current": _SET_REPORT,
            "changes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "from": {"type": "string"},
                        "to": {"type": "string"},
                        "count": {"type": "integer"},
                        "examples": {"type": "array", "items": _EXAMPLE, "maxItems": 20},
                    },
                },
            },
        },
    },
    description="Counts per outcome for the draft and the current set, and what would change",
)

GRANT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "tool", "when", "scope", "created_by", "created_at", "expires_at", "max_uses", "uses", "live"],
    "properties": {
        "id": {"type": "integer"},
        "tool": {"type": "string"},
        "when": {"type": "string"},
        "scope": {"type": "string", "enum": ["run", "key", "team"]},
        "scope_value": {"type": ["string", "null"], "description": "the run id or API key id; null for team"},
        "created_by": {"type": "string"},
        "created_at": _TIME,
        "expires_at": _TIME,
        "max_uses": {"type": "integer", "minimum": 1, "maximum": 1000},
        "uses": {"type": "integer"},
        "uses_left": {"type": "integer"},
        "revoked_at": {"type": ["string", "null"], "format": "date-time"},
        "revoked_by": {"type": ["string", "null"]},
        "from_step": {"type": ["integer", "null"]},
        "live": {"type": "boolean", "description": "not expired, not revoked, uses left"},
    },
}
GRANT = OpenApiResponse(response=GRANT_SCHEMA, description="The grant")
GRANT_PAGE = OpenApiResponse(
    response={
        "type": "object",
        "required": ["results", "next"],
        "properties": {"results": {"type": "array", "items": GRANT_SCHEMA}, "next": {"type": ["string", "null"]}},
    },
    description="A page of grants, newest first",
)


def _problems(answers: dict[int, str]) -> dict[tuple[int, str], OpenApiResponse]:
    return {
        (status, PROBLEM_MEDIA_TYPE): OpenApiResponse(response=PROBLEM_SCHEMA, description=text)
        for status, text in answers.items()
    }


_COMMON = {
    401: "No, unknown, expired or revoked reviewer token",
    404: "Not found: an unknown team, a team you are not a member of, or no such grant in it",
    429: "Throttled; see Retry-After",
}
READ_PROBLEMS = _problems(
    {**_COMMON, 403: "reviewer_token_required: an agent API key (hp_...)", 422: "A query parameter breaks the schema"}
)
TEST_PROBLEMS = _problems(
    {
        **_COMMON,
        400: "Malformed JSON, or a key named twice in one object",
        403: "reviewer_token_required: an agent API key (hp_...)",
        413: "Body larger than 1 MiB",
        422: "rules_invalid: `errors` names each field (`rules[3].when`), the rule, the CEL position and reason",
    }
)
WRITE_PROBLEMS = _problems(
    {
        **_COMMON,
        400: "Malformed JSON, or a key named twice in one object",
        403: "role_required (not an admin of the team), or reviewer_token_required (an agent API key)",
        412: "rules_changed: the set moved since the If-Match ETag; the ETag header is the current one",
        413: "Body larger than 1 MiB",
        422: "rules_invalid / grant_invalid / schema_invalid: `errors` names each field, the rule broken, "
        "the CEL position and reason, and a limit (200 rules, 2 KiB per expression) by name",
        428: "precondition_required: no If-Match (or `*`)",
    }
)

GRANT_WRITE_PROBLEMS = _problems(
    {
        **_COMMON,
        400: "Malformed JSON, or a key named twice in one object",
        403: "role_required (not an admin of the team), or reviewer_token_required (an agent API key)",
        422: "grant_invalid / schema_invalid: `errors` names the field and the rule broken (`range` for an expiry "
        "past 7 days or uses outside 1..1000, `cel` for a `when` that does not compile, `four_eyes` for a tool "
        "needing two approvals)",
    }
)

IF_MATCH_PARAMETER = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description='The ETag of the set you changed, from GET .../rules (e.g. "rules.4.12"). Without it: 428.',
)
GRANT_ID_PARAMETER = OpenApiParameter("id", int, OpenApiParameter.PATH, description="The grant's id.")

RULES_EXAMPLES = [
    OpenApiExample(
        "A set of three rules",
        value={
            "rules": [
                {"name": "no-prod-drops", "tools": ["drop_table"], "when": 'input.env == "prod"', "effect": "deny"},
                {
                    "name": "big-refunds",
                    "tools": ["issue_refund"],
                    "when": "has(input.amount_cents) && input.amount_cents > 50000",
                    "effect": "require_approval",
                    "approvals": 2,
                },
                {
                    "name": "internal-mail",
                    "tools": ["send_email"],
                    "when": 'input.to.endsWith("@example.com")',
                    "effect": "allow",
                    "mode": "shadow",
                },
            ]
        },
        request_only=True,
    ),
    OpenApiExample(
        "A rule that does not compile",
        value={
            "type": "https://holdpoint.dev/problems/rules_invalid",
            "title": "The rule set breaks a rule",
            "status": 422,
            "detail": "rule 'big-refunds', rules[1].when at position 21: undeclared reference to 'amount'",
            "code": "rules_invalid",
            "errors": [
                {
                    "field": "rules[1].when",
                    "rule": "cel",
                    "name": "big-refunds",
                    "position": 21,
                    "reason": "undeclared reference to 'amount'",
                }
            ],
        },
        response_only=True,
        status_codes=["422"],
        media_type=PROBLEM_MEDIA_TYPE,
    ),
]
