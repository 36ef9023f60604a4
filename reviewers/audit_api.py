"""GET /api/v1/teams/{team}/audit?since=&until=&cursor= (contract §13): the team's audit log
as JSON lines, for an admin's reviewer token. The lines are envelopes.audit_export's, streamed
as they are read; `python manage.py exportaudit` writes the same bytes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request

from envelopes.apikit.serializers import StrictSerializer, validated
from envelopes.audit_export import CURSOR_RE, CursorInvalid, audit_export, parse_cursor
from envelopes.rfc3339 import parse_rfc3339

from . import openapi
from .api import ReviewerApiView
from .errors import AdminRequired
from .services import team_membership

NDJSON = "application/x-ndjson"


def _time(value: str) -> datetime:
    parsed = parse_rfc3339(value) if 20 <= len(value) <= 40 and value[10:11] in ("T", "t") else None
    if parsed is None:
        raise serializers.ValidationError("RFC 3339 time with an offset.", code="format")
    return parsed


class AuditExportInput(StrictSerializer):
    since = serializers.CharField(max_length=40, required=False)
    until = serializers.CharField(max_length=40, required=False)
    cursor = serializers.RegexField(CURSOR_RE.pattern, max_length=20, required=False)

    validate_since = staticmethod(_time)
    validate_until = staticmethod(_time)

    def validate_cursor(self, value: str) -> str:
        try:
            parse_cursor(value)
        except CursorInvalid as invalid:
            raise serializers.ValidationError(str(invalid), code="format") from invalid
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and since >= until:
            raise serializers.ValidationError(
                {"until": serializers.ErrorDetail("until must be after since.", code="after_since")}
            )
        return attrs


class TeamAuditExportApi(ReviewerApiView):
    @extend_schema(
        operation_id="audit_export",
        summary="The team's audit chains and seals as JSON lines (admins), resumable by cursor",
        parameters=[
            openapi.TEAM_PARAMETER,
            OpenApiParameter("since", str, OpenApiParameter.QUERY, required=False, description="RFC 3339, inclusive."),
            OpenApiParameter("until", str, OpenApiParameter.QUERY, required=False, description="RFC 3339, exclusive."),
            OpenApiParameter(
                "cursor",
                str,
                OpenApiParameter.QUERY,
                required=False,
                description="The `cursor` of the last line received: the lines after it (no header).",
            ),
        ],
        responses={
            (200, NDJSON): OpenApiResponse(description="One JSON object per line: header, links, seals."),
            **openapi.READ_PROBLEMS,
        },
        tags=["reviewers"],
    )
    def get(self, request: Request, team: str) -> StreamingHttpResponse:
        membership = team_membership(user=request.user, team_slug=team)  # type: ignore[arg-type]
        if not membership.can_administer:
            raise AdminRequired(f"Your role in {membership.team.slug} is {membership.role}: only admins export.")
        window = validated(AuditExportInput, request.query_params.dict())
        lines = audit_export(
            team=membership.team, since=window.get("since"), until=window.get("until"), cursor=window.get("cursor")
        )
        response = StreamingHttpResponse(lines, content_type=NDJSON)
        response["Cache-Control"] = "no-store"
        response["X-Accel-Buffering"] = "no"  # a proxy in front passes lines on as they come
        return response
