"""The agent API (contract §4): one APIView per operation, thin over the services."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeGuard

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import ApiKey, Team

from . import errors, modelsql, openapi, schema, services
from .apikit.pagination import StepCursor
from .apikit.problems import CONTENT_TYPE, problem_exception_handler
from .apikit.serializers import PrintableCharField, StrictSerializer, WholeRegexField, validated
from .idempotency import (
    IN_FLIGHT_RETRY_AFTER_S,
    ClaimTaken,
    IdempotencyInFlight,
    Replay,
    body_fingerprint,
    claim_now,
    claimed_first,
    idempotency_claim,
    idempotency_store,
)
from .lifecycle import State
from .models import ErrorCode, IdempotencyRecord, SkippedResource, Step, Tool
from .presenters import decisions_prefetch, step_representation
from .proposal import proposals_load
from .rfc3339 import parse_rfc3339, rfc3339
from .transitions import RunAgain, in_callers_transaction


def request_team(request: Request) -> Team:
    assert isinstance(request.auth, ApiKey)  # HasTeamKey let the request in
    return request.auth.team


def _request_key(request: Request) -> ApiKey:
    assert isinstance(request.auth, ApiKey)  # HasTeamKey let the request in
    return request.auth


class _Unstored(Exception):
    """An answer not to replay (5xx): the work's transaction rolls back, and the claim with it."""

    def __init__(self, response: Response) -> None:
        self.response = response


def _answer(work: Callable[[], Response]) -> Response:
    """The work's response, or the problem an app error answers (a refusal, a rejected body...)."""
    try:
        return work()
    except Exception as error:
        handled = problem_exception_handler(error, {})
        if handled is None or handled.status_code >= 500:
            raise
        return handled


def _idempotent(request: Request, endpoint: str, body_sha: str, work: Callable[[], Response]) -> Response:
    """Do `work` once per Idempotency-Key: the claim, the work and the answer it stores for
    replays are one transaction (contract §4, issue 29), so no crash leaves work done and
    unanswered, and a keyed call sends the statements a plain one sends. An app error is an
    answer too, committed with what its service wrote (an attempt refusal's audit link, a
    rejected body's quarantine) and replayed like a success; a 5xx rolls back, claim and all."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return work()
    try:
        # One transaction without a savepoint for the work: the claim made with its first
        # statement, its last write held for the stored answer's. Should the work raise (a step
        # race, a new tool, a key claimed already), all of it runs again, claim first, with
        # savepoints, each write sent as it is made.
        with in_callers_transaction():
            return _keyed(request, endpoint, key, body_sha, work)
    except (RunAgain, IntegrityError, ClaimTaken) as error:
        taken = error.__cause__ if isinstance(error, RunAgain) else error
        if isinstance(taken, ClaimTaken) and taken.in_flight:
            raise IdempotencyInFlight(retry_after_s=IN_FLIGHT_RETRY_AFTER_S) from error
        return _keyed_again(request, endpoint, key, body_sha, work)


def _keyed(request: Request, endpoint: str, key: str, body_sha: str, work: Callable[[], Response]) -> Response:
    team = request_team(request)
    try:
        with (
            transaction.atomic(),
            claimed_first(team=team, endpoint=endpoint, key=key, body_sha256=body_sha) as claim,
            modelsql.writes_held(),
        ):
            response = _stored(claim, work)
    except _Unstored as unstored:
        return unstored.response
    return response


def _keyed_again(request: Request, endpoint: str, key: str, body_sha: str, work: Callable[[], Response]) -> Response:
    """The keyed call's second run: the claim a statement of its own, which finds a stored answer
    to replay, another body's key or one in flight."""
    try:
        with transaction.atomic():
            claim = idempotency_claim(team=request_team(request), endpoint=endpoint, key=key, body_sha256=body_sha)
            if isinstance(claim, Replay):
                return _replayed(claim)
            response = _stored(claim, work)
    except _Unstored as unstored:
        return unstored.response
    return response


def _stored(claim: IdempotencyRecord, work: Callable[[], Response]) -> Response:
    """The work's answer, stored for replays under the claim (made by now: `claim_now`)."""
    response = _answer(work)
    if response.status_code >= 500:
        raise _Unstored(response)
    headers = {name: response[name] for name in ("Retry-After", "Location") if response.has_header(name)}
    claim_now()
    idempotency_store(claim, status=response.status_code, body=response.data, headers=headers)
    return response


def _replayed(stored: Replay) -> Response:
    content_type = CONTENT_TYPE if stored.status >= 400 else None
    response = Response(stored.body, status=stored.status, headers=stored.headers, content_type=content_type)
    response["Idempotent-Replayed"] = "true"
    return response


class EnvelopeIngestApi(APIView):
    @extend_schema(
        operation_id="envelope_ingest",
        summary="Ingest one tool-result envelope (canonical, compact or MCP dialect)",
        parameters=[openapi.IDEMPOTENCY_PARAMETER],
        request={
            "application/json": schema.ENVELOPE_SCHEMA,
            'application/json; profile="compact"': schema.COMPACT_SCHEMA,
            'application/json; profile="mcp"': schema.MCP_SCHEMA,
        },
        responses={201: openapi.INGEST_ANSWER, **openapi.INGEST_PROBLEMS},
    )
    def post(self, request: Request) -> Response:
        try:
            dialect = schema.dialect_from_content_type(request.content_type or "")
        except schema.EnvelopeRejected as rejected:
            raise errors.EnvelopeInvalid(rejected) from rejected
        payload = request.data
        raw_body = getattr(request, "_raw_body", b"")

        def work() -> Response:
            team = request_team(request)
            answer = services.envelope_ingest(
                team=team, payload=payload, dialect=dialect, raw_body=raw_body, api_key=_request_key(request)
            )
            return Response(answer.as_dict(), status=201)

        return _idempotent(request, "envelopes", body_fingerprint(dialect, raw_body), work)


FINGERPRINT_PATTERN = r"^[0-9a-fA-F]{64}$"


class AttemptRequestInput(StrictSerializer):
    tool = WholeRegexField(schema.TOOL_PATTERN, max_length=100)
    input_fingerprint = WholeRegexField(
        FINGERPRINT_PATTERN,
        help_text="Lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of the tool call's input.",
    )
    input = serializers.JSONField(
        required=False,
        help_text=(
            "The tool call's input itself (a JSON object, at most 32 KiB in canonical form, nested at most 32"
            " deep). The server recomputes the fingerprint over it (422 fingerprint_mismatch when it differs) and"
            " stores it redacted, so that a reviewer reads what the approval binds (the step's `proposal`)."
        ),
    )
    run_id = PrintableCharField(max_length=200, required=False)
    correlation_id = PrintableCharField(max_length=200, required=False)


_ATTEMPT_FIELDS = frozenset(AttemptRequestInput._declared_fields)
_TOOL_RE = re.compile(schema.TOOL_PATTERN)
_FINGERPRINT_RE = re.compile(FINGERPRINT_PATTERN)


def _attempt_request_plain(data: Any) -> dict[str, Any] | None:
    """What `AttemptRequestInput` validates a common attempt body to, without building a DRF
    serializer (its fields are deep-copied per instance, a grant's largest CPU cost); None
    for anything else, which the serializer then judges and names the errors of. Only plain
    values pass here: strings with nothing for DRF to trim, of the right length and pattern,
    no unknown field, no null, so both give the same fields
    (tests/envelopes/test_attempt_request_plain.py)."""
    if not isinstance(data, dict) or not _ATTEMPT_FIELDS.issuperset(data):
        return None
    tool, fingerprint = data.get("tool"), data.get("input_fingerprint")
    if not (
        _plain(tool, 100) and _TOOL_RE.search(tool) and _plain(fingerprint) and _FINGERPRINT_RE.search(fingerprint)
    ):
        return None
    for name in ("run_id", "correlation_id"):
        if name in data and not (_plain(data[name], 200) and data[name].isprintable()):
            return None
    if "input" in data and data["input"] is None:
        return None
    return dict(data)


def _plain(value: Any, max_length: int | None = None) -> TypeGuard[str]:
    return (
        type(value) is str
        and value != ""
        and value == value.strip()
        and (max_length is None or len(value) <= max_length)
    )


class AttemptRequestApi(APIView):
    @extend_schema(
        operation_id="attempt_request",
        summary="The attempt gate: ask before every write",
        parameters=[openapi.REF_PARAMETER, openapi.IDEMPOTENCY_PARAMETER],
        request=AttemptRequestInput,
        responses={201: openapi.ATTEMPT_GRANT, **openapi.ATTEMPT_PROBLEMS},
        examples=openapi.ATTEMPT_REQUEST_EXAMPLES,
    )
    def post(self, request: Request, ref: str) -> Response:
        payload = request.data
        raw_body = getattr(request, "_raw_body", b"")

        def work() -> Response:
            data = _attempt_request_plain(payload) or validated(AttemptRequestInput, payload)
            fields: dict[str, Any] = {
                "team": request_team(request),
                "operation_ref": _valid_ref(ref),
                "tool_name": data["tool"],
                "fingerprint": data["input_fingerprint"].lower(),
                "run_id": data.get("run_id", ""),
                "correlation_id": data.get("correlation_id", ""),
            }
            grant = services.attempt_request(**fields, input=data.get("input"), api_key=_request_key(request))
            return Response(grant.as_dict(), status=201)

        return _idempotent(request, "attempts", body_fingerprint(ref, raw_body), work)


class VerificationReportInput(StrictSerializer):
    outcome = serializers.ChoiceField(["committed", "not_found", "unavailable"])
    evidence_ref = PrintableCharField(max_length=200, required=False)
    checked_at = serializers.CharField(max_length=64)

    def validate_checked_at(self, value: str) -> Any:
        parsed = parse_rfc3339(value)
        if parsed is None:
            raise serializers.ValidationError("RFC 3339 time with an offset.", code="format")
        out_of_bounds = schema.time_window_error("checked_at", parsed, timezone.now())
        if out_of_bounds is not None:
            raise serializers.ValidationError(out_of_bounds, code="time_window")
        return parsed


class VerificationReportApi(APIView):
    @extend_schema(
        operation_id="verification_report",
        summary="Report a lookup of the step's write by operation_ref",
        parameters=[openapi.REF_PARAMETER],
        request=VerificationReportInput,
        responses={200: openapi.STEP_ANSWER, **openapi.problem_responses()},
    )
    def post(self, request: Request, ref: str) -> Response:
        data = validated(VerificationReportInput, request.data)
        answer = services.verification_report(
            team=request_team(request),
            operation_ref=_valid_ref(ref),
            outcome=data["outcome"],
            checked_at=data["checked_at"],
            evidence_ref=data.get("evidence_ref", ""),
        )
        return Response(answer.as_dict())


def _valid_ref(ref: str) -> str:
    if not 1 <= len(ref) <= 200 or not ref.isprintable():
        raise errors.StepNotFound("No such step: an operation_ref is 1..200 printable characters.")
    return ref


def _steps(request: Request):  # type: ignore[no-untyped-def]
    return (
        Step.objects.for_team(request_team(request))
        .select_related("tool", "last_envelope")
        .prefetch_related(decisions_prefetch())
    )


class StepDetailApi(APIView):
    @extend_schema(
        operation_id="step_read",
        summary="A step: state, directive, attempts, last envelope, decisions, proposal",
        parameters=[openapi.REF_PARAMETER],
        responses={200: openapi.STEP, 304: None, **openapi.problem_responses()},
        examples=[openapi.STEP_EXAMPLE],
    )
    def get(self, request: Request, ref: str) -> Response:
        step = _steps(request).filter(operation_ref=_valid_ref(ref)).first()
        if step is None:
            raise errors.StepNotFound("No such step in this team.")
        etag = f'"{step.pk}.{step.version}"'
        if etag in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
            return Response(status=304, headers={"ETag": etag})
        return Response(step_representation(step), headers={"ETag": etag})


class StepListInput(StrictSerializer):
    state = serializers.ChoiceField([s.value for s in State], required=False)
    tool = WholeRegexField(schema.TOOL_PATTERN, max_length=100, required=False)
    run_id = PrintableCharField(max_length=200, required=False)
    cursor = serializers.CharField(max_length=500, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False)


class StepListApi(APIView):
    @extend_schema(
        operation_id="step_list",
        summary="Steps of the team, newest first, cursor-paginated",
        parameters=[StepListInput],
        responses={200: openapi.STEP_LIST, **openapi.problem_responses()},
    )
    def get(self, request: Request) -> Response:
        filters = validated(StepListInput, request.query_params.dict())
        steps = _steps(request)
        if "state" in filters:
            steps = steps.filter(state=filters["state"])
        if "tool" in filters:
            steps = steps.filter(tool__name=filters["tool"])
        if "run_id" in filters:
            steps = steps.filter(run_id=filters["run_id"])
        paginator = StepCursor()
        page: list[Step] = paginator.paginate_queryset(steps, request, view=self) or []
        proposals_load(page)
        return paginator.get_paginated_response([step_representation(step) for step in page])


def _tool(request: Request, name: str) -> Tool:
    tool = None
    if re.fullmatch(schema.TOOL_PATTERN, name):
        tool = Tool.objects.for_team(request_team(request)).filter(name=name).first()
    if tool is None:
        raise errors.ToolNotFound(f"No tool {name!r} in this team.")
    return tool


class ToolCodesApi(APIView):
    @extend_schema(
        operation_id="tool_codes",
        summary="The tool's documented error codes, team-wide entries included",
        responses={200: openapi.CODES, **openapi.problem_responses()},
    )
    def get(self, request: Request, tool: str) -> Response:
        found = _tool(request, tool)
        codes = ErrorCode.objects.filter(Q(tool=found) | Q(tool__isnull=True), team_id=found.team_id).order_by(
            "code", "tool_id"
        )
        return Response(
            {
                "tool": found.name,
                "codes": [
                    {
                        "code": code.code,
                        "scope": "tool" if code.tool_id else "team",
                        "category": code.category,
                        "retry_class": code.retry_class,
                        "next_action": code.next_action,
                        "side_effect": code.side_effect,
                        "description": code.description,
                        "hint": code.hint,
                    }
                    for code in codes
                ],
            }
        )


class RunSkippedApi(APIView):
    @extend_schema(
        operation_id="run_skipped",
        summary="Resources skipped in a run (scope: resource), with their correlation ids",
        responses={200: openapi.SKIPPED, **openapi.problem_responses()},
    )
    def get(self, request: Request, run_id: str) -> Response:
        if not 1 <= len(run_id) <= 200 or not run_id.isprintable():
            raise errors.HoldpointError("A run_id is 1..200 printable characters.")
        skipped = SkippedResource.objects.filter(team=request_team(request), run_id=run_id).order_by(
            "occurred_at", "id"
        )[:1000]
        return Response(
            {
                "run_id": run_id,
                "skipped": [
                    {
                        "resource_id": row.resource_id,
                        "correlation_id": row.correlation_id,
                        "code": row.code,
                        "operation_ref": row.operation_ref,
                        "occurred_at": rfc3339(row.occurred_at),
                    }
                    for row in skipped
                ],
            }
        )
