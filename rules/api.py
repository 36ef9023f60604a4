"""The rules API (contract §11, "Rules as code"): a team's rule set with its ETag, replaced whole
with If-Match; the test against history for a draft; and the team's grants.

Reviewer tokens only, as the reviewer API (reviewers.auth): an agent API key is 403 before
anything is read, another team (or one the token's user is not in) is 404, a viewer reads, and
only the team's admins change anything. Every change goes through rules.services, which writes
the audit link in the change's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, parsers, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Membership, Team
from envelopes.apikit.pagination import StepCursor
from envelopes.apikit.parsers import decode_json
from envelopes.apikit.serializers import StrictSerializer, validated
from policy.errors import GrantRefused as PolicyGrantRefused
from policy.errors import RulesInvalid, VersionMismatch
from policy.models import Grant
from reviewers.auth import IsReviewer, ReviewerTokenAuthentication, ReviewerTokenRateThrottle
from reviewers.services import team_membership

from . import openapi
from .errors import AdminRequired, GrantNotFound, GrantRefused, RulesChanged, RulesPreconditionRequired, RulesRefused
from .history import history_test
from .ruleset import set_editable
from .services import (
    etag_matches,
    grant_add,
    grant_remove,
    grant_shape,
    rule_set_replace,
    rule_shape,
    rules_current,
    set_etag,
)
from .validation import problems_as_errors, rules_checked

# 200 rules of 2 KiB each, with their other fields, fit; the agent API's 64 KiB would not.
MAX_RULES_BODY = 1024 * 1024


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "The body is larger than 1 MiB."
    default_code = "payload_too_large"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("a key is named twice in one object; say which value you mean")
    return value


class RulesJSONParser(parsers.BaseParser):
    """JSON up to 1 MiB, no NaN, no key twice in one object (a rule naming `when` twice would
    otherwise be saved with whichever came last)."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        body = b"" if stream is None else stream.read(MAX_RULES_BODY + 1)
        if len(body) > MAX_RULES_BODY:
            raise PayloadTooLarge()
        return decode_json(body, object_pairs_hook=_unique_keys)


class RulesApiView(APIView):
    authentication_classes = [ReviewerTokenAuthentication]
    parser_classes = [RulesJSONParser]
    permission_classes = [IsReviewer]
    throttle_classes = [ReviewerTokenRateThrottle]

    def membership(self, request: Request, slug: str) -> Membership:
        return team_membership(user=request.user, team_slug=slug)  # type: ignore[arg-type]

    def admin_team(self, request: Request, slug: str) -> Team:
        membership = self.membership(request, slug)
        if not membership.can_administer:
            raise AdminRequired(f"Your role in {slug} is {membership.role}: only admins change rules and grants.")
        return membership.team


def actor_of(request: Request) -> str:
    return request.user.get_username()  # type: ignore[union-attr]


def _set_answer(team: Team) -> Response:
    version, rules = rules_current(team)
    return Response(
        {"version": version, "rules": [rule_shape(rule) for rule in rules]}, headers={"ETag": set_etag(team, version)}
    )


class RulesSetInput(StrictSerializer):
    version = serializers.IntegerField(required=False, min_value=0)  # as served; If-Match decides
    rules = serializers.ListField(child=serializers.JSONField(), allow_empty=True)


def _draft_of(request: Request) -> list[Any]:
    return set_editable(validated(RulesSetInput, request.data)["rules"])


class TeamRulesApi(RulesApiView):
    @extend_schema(
        operation_id="rules_read",
        summary="The team's rule set, its version and ETag",
        parameters=[openapi.TEAM_PARAMETER, openapi.IF_NONE_MATCH_PARAMETER],
        responses={200: openapi.RULE_SET, 304: None, **openapi.READ_PROBLEMS},
        tags=["rules"],
    )
    def get(self, request: Request, team: str) -> Response:
        found = self.membership(request, team).team
        version, _ = rules_current(found)
        etag = set_etag(found, version)
        if etag in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
            return Response(status=304, headers={"ETag": etag})
        return _set_answer(found)

    @extend_schema(
        operation_id="rules_replace",
        summary="Replace the team's whole rule set, if it is still the version If-Match names (admins)",
        parameters=[openapi.TEAM_PARAMETER, openapi.IF_MATCH_PARAMETER],
        request=openapi.RULE_SET_REQUEST,
        responses={200: openapi.RULE_SET, **openapi.WRITE_PROBLEMS},
        examples=openapi.RULES_EXAMPLES,
        tags=["rules"],
    )
    def put(self, request: Request, team: str) -> Response:
        found = self.admin_team(request, team)
        draft = _draft_of(request)
        if_match = request.headers.get("If-Match", "").strip()
        if not if_match or if_match == "*":
            raise RulesPreconditionRequired("Send If-Match with the ETag of the set you changed (GET the rules).")
        version, _ = rules_current(found)
        if not etag_matches(if_match, found, version):
            raise RulesChanged(f"The rule set is at version {version} now.", etag=set_etag(found, version))
        try:
            rule_set_replace(team=found, rules=draft, actor=actor_of(request), if_version=version, via="api")
        except RulesInvalid as invalid:
            raise RulesRefused(_refusal_detail(invalid.problems), errors=problems_as_errors(invalid.problems)) from None
        except VersionMismatch:
            # Someone saved between the read above and the lock: the same 412.
            version, _ = rules_current(found)
            raise RulesChanged(f"The rule set is at version {version} now.", etag=set_etag(found, version)) from None
        return _set_answer(found)


def _refusal_detail(problems: list[dict[str, Any]]) -> str:
    first = problems[0] if problems else {}
    where = f"{first.get('field', 'rules')}: " if first else ""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}{first.get('reason', 'invalid')}{more}"


class TeamRulesTestApi(RulesApiView):
    @extend_schema(
        operation_id="rules_test",
        summary="The test against history: a draft set over the last 30 days' proposals, beside the current set",
        parameters=[openapi.TEAM_PARAMETER],
        request=openapi.RULE_SET_REQUEST,
        responses={200: openapi.HISTORY_REPORT, **openapi.TEST_PROBLEMS},
        tags=["rules"],
    )
    def post(self, request: Request, team: str) -> Response:
        found = self.membership(request, team).team  # a test changes nothing: every member may run one
        draft = rules_checked(_draft_of(request), found)
        _, rules = rules_current(found)
        report = history_test(team=found, draft=draft, current=[rule_shape(rule) for rule in rules])
        return Response(report.as_json())


class GrantCursor(StepCursor):
    ordering = ("-created_at", "-id")


class GrantListInput(StrictSerializer):
    live = serializers.BooleanField(required=False, allow_null=True, default=None)
    cursor = serializers.CharField(max_length=500, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False)


class GrantInput(StrictSerializer):
    tool = serializers.CharField(max_length=100)
    when = serializers.CharField(max_length=4096, allow_blank=False, trim_whitespace=False)
    scope = serializers.ChoiceField(["run", "key", "team"])
    scope_value = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    expires_in_s = serializers.IntegerField(required=False, default=3600)
    max_uses = serializers.IntegerField(required=False, default=20)


class TeamGrantsApi(RulesApiView):
    @extend_schema(
        operation_id="grants_list",
        summary="The team's grants, newest first (`live=true`: only those that can still match)",
        parameters=[openapi.TEAM_PARAMETER, GrantListInput],
        responses={200: openapi.GRANT_PAGE, **openapi.READ_PROBLEMS},
        tags=["rules"],
    )
    def get(self, request: Request, team: str) -> Response:
        found = self.membership(request, team).team
        filters = validated(GrantListInput, request.query_params.dict())
        grants = Grant.objects.filter(team=found)
        if filters["live"] is not None:
            live = Grant.objects.filter(team=found).live()
            grants = live if filters["live"] else grants.exclude(pk__in=live.values("pk"))
        paginator = GrantCursor()
        page: list[Grant] = paginator.paginate_queryset(grants, request, view=self) or []
        return paginator.get_paginated_response([grant_shape(grant) for grant in page])

    @extend_schema(
        operation_id="grants_create",
        summary="Make a standing grant (admins): a tool's calls matching `when` need no reviewer",
        parameters=[openapi.TEAM_PARAMETER],
        request=GrantInput,
        responses={201: openapi.GRANT, **openapi.GRANT_WRITE_PROBLEMS},
        tags=["rules"],
    )
    def post(self, request: Request, team: str) -> Response:
        found = self.admin_team(request, team)
        data = validated(GrantInput, request.data)
        try:
            grant = grant_add(team=found, actor=actor_of(request), via="api", **data)
        except PolicyGrantRefused as refused:
            raise GrantRefused(
                str(refused), errors=[{"field": refused.field, "rule": refused.rule, "reason": str(refused)}]
            ) from None
        return Response(grant_shape(grant), status=201)


class TeamGrantApi(RulesApiView):
    @extend_schema(
        operation_id="grants_revoke",
        summary="Revoke a grant at once (admins); revoking a revoked grant answers it as it is",
        parameters=[openapi.TEAM_PARAMETER, openapi.GRANT_ID_PARAMETER],
        request=None,
        responses={200: openapi.GRANT, **openapi.GRANT_WRITE_PROBLEMS},
        tags=["rules"],
    )
    def delete(self, request: Request, team: str, pk: int) -> Response:
        found = self.admin_team(request, team)
        if not Grant.objects.filter(team=found, pk=pk).exists():
            raise GrantNotFound("No such grant in this team.")
        grant = grant_remove(team=found, grant_id=pk, actor=actor_of(request), via="api")
        return Response(grant_shape(grant))
