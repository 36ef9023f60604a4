"""The reviewer API (contract §10): a team's queues, a step with its ETag, and decisions.

Reviewer tokens only (reviewers.auth); every query starts from the token user's membership of
the team in the path. Decisions go through reviewers.services.decide_with_etag, which calls
the dashboard form's decision service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Team
from approvals.for_you import decidable_q, user_groups, with_held_group
from approvals.queries import STEP_QUEUES
from approvals.similar import made_grant
from envelopes.apikit.pagination import StepCursor
from envelopes.apikit.parsers import EnvelopeJSONParser, decode_json, read_limited
from envelopes.apikit.serializers import StrictSerializer, validated
from envelopes.errors import HoldpointError
from envelopes.models import Decision, Step
from envelopes.openapi import REF_PARAMETER  # the agent API's: the same ref, URL-encoded
from envelopes.presenters import decision_representation, decisions_prefetch, step_representation
from envelopes.proposal import proposals_load

from . import openapi
from .auth import IsReviewer, ReviewerTokenAuthentication, ReviewerTokenRateThrottle
from .services import (
    decide_with_etag,
    decider_membership,
    decision_refusal_log,
    grant_representation,
    step_etag,
    step_of_team,
    team_membership,
)

# The queues §10 serves (the dashboard's own, by the same state sets).
QUEUE_KINDS = {queue.key: queue for queue in STEP_QUEUES if queue.key in ("approvals", "verifications", "escalations")}
REASON_MAX = 1000


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("a key is named twice in one object; say which value you decide on")
    return value


class DecisionJSONParser(EnvelopeJSONParser):
    """The API's JSON (64 KiB, no NaN), and no key twice in one object: json.loads would keep
    the last value, so a reviewer could approve an input they did not mean (the step page's
    edit form refuses duplicate keys too)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        return decode_json(read_limited(stream), object_pairs_hook=_unique_keys)


class ReviewerApiView(APIView):
    authentication_classes = [ReviewerTokenAuthentication]
    parser_classes = [DecisionJSONParser]
    permission_classes = [IsReviewer]
    throttle_classes = [ReviewerTokenRateThrottle]

    def team(self, request: Request, slug: str) -> Team:
        return team_membership(user=request.user, team_slug=slug).team  # type: ignore[arg-type]


def _for_step_shape(steps: QuerySet[Step]) -> QuerySet[Step]:
    """What step_representation reads, joined or prefetched: the tool, the last envelope and
    the decisions with their reviewers."""
    return steps.select_related("tool", "last_envelope").prefetch_related(decisions_prefetch())


class QueueCursor(StepCursor):
    # Oldest held first; served by the held-queue index (team, state, state_entered_at).
    ordering = ("state_entered_at", "id")


class QueueInput(StrictSerializer):
    kind = serializers.ChoiceField(list(QUEUE_KINDS), required=False, default="approvals")
    cursor = serializers.CharField(max_length=500, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False)


# `?for=me`: only the steps the token's user may approve or reject (contract §12 "For you").
QueueInput._declared_fields["for"] = serializers.ChoiceField(
    ["me"], required=False, help_text="me: only the steps waiting for approval that you may decide (§12)."
)


class TeamQueueApi(ReviewerApiView):
    @extend_schema(
        operation_id="reviewer_queue",
        summary="A team's review queue: approvals (default), verifications or escalations",
        parameters=[openapi.TEAM_PARAMETER, QueueInput],
        responses={200: openapi.QUEUE_PAGE, **openapi.READ_PROBLEMS},
        tags=["reviewers"],
    )
    def get(self, request: Request, team: str) -> Response:
        membership = team_membership(user=request.user, team_slug=team)  # type: ignore[arg-type]
        found = membership.team
        filters = validated(QueueInput, request.query_params.dict())
        queue = QUEUE_KINDS[filters["kind"]]
        steps: QuerySet[Step] = Step.objects.for_team(found).filter(state__in=[s.value for s in queue.states])
        if filters.get("for") == "me":
            steps = with_held_group(steps).filter(decidable_q([membership], user_groups(request.user)))
        steps = _for_step_shape(steps)
        paginator = QueueCursor()
        page: list[Step] = paginator.paginate_queryset(steps, request, view=self) or []
        proposals_load(page)  # the page's proposals in two queries, not two per step
        return paginator.get_paginated_response([step_representation(step) for step in page])


class TeamStepApi(ReviewerApiView):
    @extend_schema(
        operation_id="reviewer_step_read",
        summary="A step of the team (the §4 shape) with its ETag, for deciding with If-Match",
        parameters=[openapi.TEAM_PARAMETER, REF_PARAMETER, openapi.IF_NONE_MATCH_PARAMETER],
        responses={200: openapi.STEP, 304: None, **openapi.READ_PROBLEMS},
        tags=["reviewers"],
    )
    def get(self, request: Request, team: str, ref: str) -> Response:
        found = self.team(request, team)
        step = _for_step_shape(Step.objects.filter(pk=step_of_team(found, ref).pk)).get()
        etag = step_etag(step)
        if etag in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
            return Response(status=304, headers={"ETag": etag})
        return Response(step_representation(step), headers={"ETag": etag})


class JsonStringField(serializers.CharField):
    """A JSON string only: DRF's CharField would take 5 or true as "5" and "True"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("A string.", code="type")
        return super().to_internal_value(data)


class GrantInput(StrictSerializer):
    """`grant` in an approval's body (contract §11): "approve and allow similar"."""

    when = JsonStringField(max_length=2048, required=False)
    scope = serializers.ChoiceField(["run", "key", "team"])
    expires_in_s = serializers.IntegerField(min_value=1, max_value=7 * 24 * 3600, required=False, default=3600)
    max_uses = serializers.IntegerField(min_value=1, max_value=1000, required=False, default=20)


class DecisionInput(StrictSerializer):
    action = serializers.ChoiceField(Decision.Action.values)
    reason = JsonStringField(max_length=REASON_MAX, required=False, allow_blank=True, default="")
    input = serializers.DictField(required=False, allow_null=True)
    grant = GrantInput(required=False, allow_null=True)


def _action_of(request: Request) -> str:
    """The action a body names, for the log of a refusal; "" when the body does not parse."""
    try:
        data = request.data
    except exceptions.APIException:
        return ""
    return str(data.get("action", "")) if isinstance(data, dict) else ""


class StepDecisionApi(ReviewerApiView):
    @extend_schema(
        operation_id="reviewer_decide",
        summary="Decide on a held step, if it is still the version the If-Match ETag names",
        parameters=[openapi.TEAM_PARAMETER, REF_PARAMETER, openapi.IF_MATCH_PARAMETER],
        request=DecisionInput,
        responses={201: openapi.DECISION_ANSWER, **openapi.DECISION_PROBLEMS},
        examples=openapi.DECISION_EXAMPLES,
        tags=["reviewers"],
    )
    def post(self, request: Request, team: str, ref: str) -> Response:
        # Who may decide, before what the body says (decide_with_etag checks it again, in order).
        try:
            decider_membership(user=request.user, team_slug=team)  # type: ignore[arg-type]
        except HoldpointError as refused:
            decision_refusal_log(user=request.user, team_slug=team, action=_action_of(request), refused=refused)  # type: ignore[arg-type]
            raise
        data = validated(DecisionInput, request.data)
        result = decide_with_etag(
            user=request.user,  # type: ignore[arg-type]
            team_slug=team,
            operation_ref=ref,
            action=data["action"],
            etag=request.headers.get("If-Match", ""),
            reason=data.get("reason") or "",
            edited_input=data.get("input"),
            grant=data.get("grant"),
        )
        step = _for_step_shape(Step.objects.filter(pk=result.step.pk)).get()
        answer = {"decision": decision_representation(result.decision), "step": step_representation(step)}
        made = made_grant(result, actor=request.user.get_username())
        if made is not None and data.get("grant") is not None:
            answer["grant"] = grant_representation(made)
        return Response(answer, status=201, headers={"ETag": step_etag(step)})
