"""The reviewer API's shapes and examples for the OpenAPI document (contract §10)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from envelopes.openapi import PROBLEM_MEDIA_TYPE, PROBLEM_SCHEMA, RECEIPT, STEP_SCHEMA

_TIME = {"type": "string", "format": "date-time"}

DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["action", "reviewer", "reason", "decided_at", "input_fingerprint", "edited"],
    "properties": {
        "action": {"type": "string", "enum": ["approve", "reject", "mark_committed", "permit_retry", "cancel"]},
        "reviewer": {"type": "string"},
        "reason": {"type": "string"},
        "decided_at": _TIME,
        "input_fingerprint": {"type": ["string", "null"]},
        "edited": {"type": "boolean"},
        "receipt": RECEIPT,
    },
}

GRANT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "tool", "when", "when_in_words", "scope", "created_by", "expires_at", "max_uses", "uses"],
    "properties": {
        "id": {"type": "integer"},
        "tool": {"type": "string"},
        "when": {"type": "string", "description": "CEL, as rules (§11)."},
        "when_in_words": {"type": "string"},
        "scope": {"type": "string", "enum": ["run", "key", "team"]},
        "created_by": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
        "expires_at": {"type": "string", "format": "date-time"},
        "max_uses": {"type": "integer", "minimum": 1, "maximum": 1000},
        "uses": {"type": "integer", "minimum": 0},
        "from_step": {"type": ["integer", "null"]},
    },
}
DECISION_ANSWER = OpenApiResponse(
    response={
        "type": "object",
        "required": ["decision", "step"],
        "properties": {"decision": DECISION_SCHEMA, "step": STEP_SCHEMA, "grant": GRANT_SCHEMA},
    },
    description="Decided. `step` is the step after the decision; the ETag header is its new tag; "
    "`grant`, when the approval carried one (§11), the standing grant it made.",
)
QUEUE_PAGE = OpenApiResponse(
    response={
        "type": "object",
        "required": ["results", "next"],
        "properties": {"results": {"type": "array", "items": STEP_SCHEMA}, "next": {"type": ["string", "null"]}},
    },
    description="A page of the queue, oldest held first",
)
STEP = OpenApiResponse(response=STEP_SCHEMA, description="The step (§4 shape); the ETag header is its tag")


def _problems(answers: dict[int, str]) -> dict[tuple[int, str], OpenApiResponse]:
    """Responses keyed by (status, media type): errors are documented as problem+json."""
    return {
        (status, PROBLEM_MEDIA_TYPE): OpenApiResponse(response=PROBLEM_SCHEMA, description=text)
        for status, text in answers.items()
    }


_UNAUTHENTICATED = "No, unknown, expired or revoked reviewer token"
_NOT_FOUND = "Not found: an unknown team, a team you are not a member of, or no such step in it"
_THROTTLED = "Throttled; see Retry-After"
READ_PROBLEMS = _problems(
    {
        401: _UNAUTHENTICATED,
        403: "reviewer_token_required: an agent API key (hp_...) is never accepted here",
        404: _NOT_FOUND,
        422: "A query parameter breaks the schema",
        429: _THROTTLED,
    }
)
DECISION_PROBLEMS = _problems(
    {
        400: "Malformed JSON",
        401: _UNAUTHENTICATED,
        403: "role_required (a viewer, or outside the step's approver group: `group` names it), "
        "or reviewer_token_required (an agent API key)",
        404: _NOT_FOUND,
        409: "decision_not_allowed: the step's state does not allow the action, or you already approved",
        412: "step_changed: the step moved since the If-Match ETag (already decided); `step` is the step now",
        413: "Body larger than 64 KiB",
        422: "reason_required, an unknown action, input for another action than approve, input_refused",
        428: "precondition_required: no If-Match",
        429: _THROTTLED,
    }
)

TEAM_PARAMETER = OpenApiParameter("team", str, OpenApiParameter.PATH, description="The team's slug.")
IF_MATCH_PARAMETER = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description='The ETag of the step you decided on, from GET .../steps/{ref} (e.g. "42.7"). Without it: 428.',
)
IF_NONE_MATCH_PARAMETER = OpenApiParameter(
    "If-None-Match",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="A tag you hold: 304 while it is current.",
)

DECISION_EXAMPLES = [
    OpenApiExample("Approve", value={"action": "approve"}, request_only=True),
    OpenApiExample(
        "Approve with an edited input",
        value={"action": "approve", "reason": "Lower amount", "input": {"amount": 900, "currency": "EUR"}},
        request_only=True,
    ),
    OpenApiExample("Reject", value={"action": "reject", "reason": "Over the customer's limit"}, request_only=True),
    OpenApiExample(
        "Decided",
        value={
            "decision": {
                "action": "reject",
                "reviewer": "rita",
                "reason": "Over the customer's limit",
                "decided_at": "2026-11-30T10:00:00Z",
                "input_fingerprint": None,
                "edited": False,
            },
            "step": {"operation_ref": "run_7/charge_1", "state": "cancelled", "reason": "rejected", "...": "..."},
        },
        response_only=True,
        status_codes=["201"],
    ),
    OpenApiExample(
        "Already decided",
        value={
            "type": "https://holdpoint.dev/problems/step_changed",
            "title": "The step changed since that ETag",
            "status": 412,
            "detail": "The step changed since that ETag: it is now cancelled (rejected).",
            "code": "step_changed",
            "step": {"operation_ref": "run_7/charge_1", "state": "cancelled", "...": "..."},
        },
        response_only=True,
        status_codes=["412"],
        media_type=PROBLEM_MEDIA_TYPE,
    ),
    OpenApiExample(
        "No If-Match",
        value={
            "type": "https://holdpoint.dev/problems/precondition_required",
            "title": "If-Match with the step's ETag is required",
            "status": 428,
            "detail": "Send If-Match with the ETag of the step you decided on (GET the step).",
            "code": "precondition_required",
        },
        response_only=True,
        status_codes=["428"],
        media_type=PROBLEM_MEDIA_TYPE,
    ),
    OpenApiExample(
        "A reason is missing",
        value={
            "type": "https://holdpoint.dev/problems/reason_required",
            "title": "The decision breaks a rule",
            "status": 422,
            "detail": "A reason is required for this decision.",
            "code": "reason_required",
            "errors": [{"field": "reason", "rule": "required"}],
        },
        response_only=True,
        status_codes=["422"],
        media_type=PROBLEM_MEDIA_TYPE,
    ),
]


class ReviewerTokenScheme(OpenApiAuthenticationExtension):
    """Documents `Authorization: Bearer hpr_...` in the OpenAPI document."""

    target_class = "reviewers.auth.ReviewerTokenAuthentication"
    name = "ReviewerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "hpr_ reviewer token",
            "description": "A personal reviewer token, made at /account/tokens/. Acts as its user.",
        }
