"""The reviewer API's away setting (contract §12 "Delegation"): `GET`, `PUT` and `DELETE
/api/v1/teams/{team}/away`, the token user's own time away from one team and the delegate who
decides for them meanwhile. The account page's form calls the same services (accounts.away)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.away import AwayError, away_clear, away_set
from accounts.models import Membership
from envelopes.apikit.serializers import StrictSerializer, validated
from envelopes.rfc3339 import parse_rfc3339, rfc3339

from . import openapi
from .api import ReviewerApiView
from .errors import AwayInvalid, RoleRequired
from .services import team_membership


class Rfc3339Field(serializers.Field):
    """An RFC 3339 time with an offset (DRF's DateTimeField takes a time without one)."""

    def to_internal_value(self, data: Any) -> Any:
        parsed = parse_rfc3339(data) if isinstance(data, str) and len(data) <= 40 else None
        if parsed is None:
            raise serializers.ValidationError("An RFC 3339 time with an offset.", code="format")
        return parsed


class AwayInput(StrictSerializer):
    until = Rfc3339Field(help_text="When you are back: in the future, at most a year ahead.")
    delegate = serializers.CharField(
        max_length=150, help_text="The username of another reviewer or admin of the team, who decides for you."
    )


AWAY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["team", "user", "away", "away_until", "delegate"],
    "properties": {
        "team": {"type": "string"},
        "user": {"type": "string"},
        "away": {"type": "boolean", "description": "away now: away_until is in the future"},
        "away_until": {"type": ["string", "null"], "format": "date-time"},
        "delegate": {"type": ["string", "null"], "description": "who decides for you while you are away"},
    },
}
AWAY = OpenApiResponse(response=AWAY_SCHEMA, description="Your away setting in the team")
AWAY_PROBLEMS = {
    **openapi.READ_PROBLEMS,
    **openapi._problems(
        {
            400: "Malformed JSON",
            403: "role_required: only reviewers and admins can be away (and delegates), "
            "or reviewer_token_required (an agent API key)",
            422: "away_invalid naming `until` (not in the future, more than a year ahead) or `delegate` "
            "(yourself, not a reviewer or admin of the team, away too); or a body that breaks the schema",
        }
    ),
}


def away_representation(membership: Membership) -> dict[str, Any]:
    away = membership.is_away(timezone.now())
    return {
        "team": membership.team.slug,
        "user": membership.user.get_username(),
        "away": away,
        "away_until": rfc3339(membership.away_until) if away else None,
        "delegate": membership.delegate.get_username() if away and membership.delegate else None,
    }


class TeamAwayApi(ReviewerApiView):
    def _membership(self, request: Request, team: str) -> Membership:
        return Membership.objects.select_related("team", "user", "delegate").get(
            pk=team_membership(user=request.user, team_slug=team).pk  # type: ignore[arg-type]
        )

    @extend_schema(
        operation_id="reviewer_away_read",
        summary="Your time away from the team and your delegate (§12 Delegation)",
        parameters=[openapi.TEAM_PARAMETER],
        responses={200: AWAY, **openapi.READ_PROBLEMS},
        tags=["reviewers"],
    )
    def get(self, request: Request, team: str) -> Response:
        return Response(away_representation(self._membership(request, team)))

    @extend_schema(
        operation_id="reviewer_away_set",
        summary="Be away until a time, a delegate deciding for you meanwhile (§12 Delegation)",
        parameters=[openapi.TEAM_PARAMETER],
        request=AwayInput,
        responses={200: AWAY, **AWAY_PROBLEMS},
        tags=["reviewers"],
    )
    def put(self, request: Request, team: str) -> Response:
        membership = self._membership(request, team)
        data = validated(AwayInput, request.data)
        try:
            away_set(user=membership.user, team=membership.team, until=data["until"], delegate=data["delegate"])
        except AwayError as refused:
            raise AwayInvalid(str(refused), field=refused.field, rule="away") from refused
        except PermissionError as refused:
            raise RoleRequired(str(refused)) from refused
        return Response(away_representation(self._membership(request, team)))

    @extend_schema(
        operation_id="reviewer_away_clear",
        summary="Be back: your delegate decides for you no more (§12 Delegation)",
        parameters=[openapi.TEAM_PARAMETER],
        request=None,
        responses={200: AWAY, **openapi.READ_PROBLEMS},
        tags=["reviewers"],
    )
    def delete(self, request: Request, team: str) -> Response:
        membership = self._membership(request, team)
        away_clear(user=membership.user, team=membership.team)
        return Response(away_representation(self._membership(request, team)))
