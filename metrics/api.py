"""`GET /api/v1/tools/{tool}/metrics?since=&until=` (contract §4, §6)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from envelopes import openapi
from envelopes.api import request_team
from envelopes.apikit.serializers import StrictSerializer
from envelopes.errors import ToolNotFound
from envelopes.models import TOOL_NAME_RE, Tool
from envelopes.rfc3339 import parse_rfc3339

from .queries import DEFAULT_WINDOW, MAX_WINDOW, tool_metrics

_COUNT = {"type": "integer", "minimum": 0}
_SECONDS = {"type": ["number", "null"], "minimum": 0}
_PERCENTILES = {
    "type": "object",
    "required": ["p50", "p95"],
    "properties": {"p50": _SECONDS, "p95": _SECONDS},
    "description": "Nearest-rank percentiles in seconds; null without samples.",
}
POLICY_COUNTS = (
    "denied_by_rule", "held_by_rule", "approved_by_rule", "approved_by_grant",
    "shadow_would_deny", "shadow_would_hold", "shadow_would_allow", "evaluation_errors",
)  # fmt: skip
METRICS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "tool", "since", "until", "envelopes", "documented_code_share", "unknown_outcomes",
        "resolved_by_verification", "duplicate_writes_prevented", "pending_recovery_seconds",
        "terminal_escalations", "approvals", "attempts_per_step", "attempt_budget_exhausted",
        "redactions", "suspicious_text", "policy",
    ],
    "properties": {
        "tool": {"type": "string"},
        "since": {"type": "string", "format": "date-time", "description": "Inclusive."},
        "until": {"type": "string", "format": "date-time", "description": "Exclusive."},
        "envelopes": {
            "type": "object",
            "required": ["total", "errors", "successes", "by_code", "by_category"],
            "properties": {
                "total": _COUNT,
                "errors": _COUNT,
                "successes": _COUNT,
                "by_code": {"type": "object", "additionalProperties": _COUNT, "description": "Errors by code."},
                "by_category": {"type": "object", "additionalProperties": _COUNT, "description": "Errors by category."},
            },
        },
        "documented_code_share": {
            "type": ["number", "null"], "minimum": 0, "maximum": 1,
            "description": "Error envelopes whose code was in the catalog when they arrived / all error "
            "envelopes; alert below 0.90.",
        },
        "unknown_outcomes": _COUNT,
        "resolved_by_verification": _COUNT,
        "duplicate_writes_prevented": _COUNT,
        "pending_recovery_seconds": _PERCENTILES,
        "terminal_escalations": _COUNT,
        "approvals": {
            "type": "object",
            "required": ["requested", "approved", "rejected", "expired", "latency_seconds", "by"],
            "properties": {
                "requested": _COUNT,
                "approved": _COUNT,
                "rejected": _COUNT,
                "expired": _COUNT,
                "latency_seconds": _PERCENTILES,
                "by": {
                    "type": "object",
                    "required": ["reviewer", "rule", "grant"],
                    "properties": {"reviewer": _COUNT, "rule": _COUNT, "grant": _COUNT},
                    "description": "Who approved (§11): reviewers; allow rules; grants (a held step "
                    "approved, or a call the gate let through on a grant).",
                },
            },
        },
        "policy": {
            "type": "object",
            "required": list(POLICY_COUNTS),
            "properties": dict.fromkeys(POLICY_COUNTS, _COUNT),
            "description": "What rules and grants did (§11). The shadow counts and evaluation errors "
            "count the whole UTC days the window touches.",
        },
        "attempts_per_step": {"type": ["number", "null"], "minimum": 0},
        "attempt_budget_exhausted": _COUNT,
        "redactions": _COUNT,
        "suspicious_text": _COUNT,
    },
}
METRICS = OpenApiResponse(response=METRICS_SCHEMA, description="The tool's metrics for the window")
WINDOW_PARAMETERS = [
    OpenApiParameter(
        "since", str, OpenApiParameter.QUERY, required=False,
        description="RFC 3339 with offset, inclusive. Default: 24 hours before `until`.",
    ),
    OpenApiParameter(
        "until", str, OpenApiParameter.QUERY, required=False,
        description="RFC 3339 with offset, exclusive. Default: now. At most 90 days after `since`.",
    ),
]

# The problems this endpoint answers, as problem+json (envelopes.openapi's helper), keyed
# (status, media type).
ERRORS = {key: answer for key, answer in openapi.problem_responses().items() if key[0] in (401, 404, 422, 429)}


_EARLIEST = datetime.min.replace(tzinfo=UTC) + DEFAULT_WINDOW
_LATEST = datetime.max.replace(tzinfo=UTC) - DEFAULT_WINDOW


def parse_time(value: str) -> datetime | None:
    """RFC 3339 with an offset (`Z` or `+hh:mm`), in UTC; None for anything else, and for a time
    within the default window of datetime's ends (its offset or the window would leave the range).

    A `+` that was not URL-encoded arrives as a space; it is read as the `+` it was.
    """
    value = value[:19] + value[19:].replace(" ", "+")
    if not 20 <= len(value) <= 40 or value[10:11] not in ("T", "t"):
        return None
    in_utc = parse_rfc3339(value)
    return in_utc if in_utc is not None and _EARLIEST <= in_utc <= _LATEST else None


class MetricsWindowInput(StrictSerializer):
    since = serializers.CharField(max_length=40, required=False)
    until = serializers.CharField(max_length=40, required=False)

    def _time(self, value: str) -> datetime:
        parsed = parse_time(value)
        if parsed is None:
            raise serializers.ValidationError("RFC 3339 time with an offset.", code="format")
        return parsed

    validate_since = _time
    validate_until = _time

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        until = attrs.get("until") or timezone.now()
        since = attrs.get("since") or until - DEFAULT_WINDOW
        if since >= until:
            raise serializers.ValidationError(
                {"until": serializers.ErrorDetail("until must be after since.", code="after_since")}
            )
        if until - since > MAX_WINDOW:
            raise serializers.ValidationError(
                {"since": serializers.ErrorDetail("The window is at most 90 days.", code="max_window")}
            )
        return {"since": since.astimezone(UTC), "until": until.astimezone(UTC)}


class ToolMetricsApi(APIView):
    @extend_schema(
        operation_id="tool_metrics",
        summary="The tool's recovery metrics for a time window",
        parameters=WINDOW_PARAMETERS,
        responses={200: METRICS, **ERRORS},
    )
    def get(self, request: Request, tool: str) -> Response:
        found = None
        if re.fullmatch(TOOL_NAME_RE, tool):
            found = Tool.objects.for_team(request_team(request)).filter(name=tool).first()
        if found is None:
            raise ToolNotFound(f"No tool {tool!r} in this team.")
        window = MetricsWindowInput(data=request.query_params.dict())
        if not window.is_valid():
            raise exceptions.ValidationError(window.errors)
        return Response(tool_metrics(found, window.validated_data["since"], window.validated_data["until"]))
