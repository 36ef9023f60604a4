"""RFC 9457 problem+json for every API error, with the contract's stable `code`."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response

from config import outage
from envelopes.errors import AttemptRefused, EnvelopeInvalid, HoldpointError
from envelopes.schema import safe_field_name

PROBLEM_TYPE = "https://holdpoint.dev/problems/"
CONTENT_TYPE = "application/problem+json"

_DRF_CODES = {
    exceptions.ParseError: ("malformed_json", "Malformed JSON"),
    exceptions.NotAuthenticated: ("not_authenticated", "Authentication required"),
    exceptions.AuthenticationFailed: ("authentication_failed", "Authentication failed"),
    exceptions.PermissionDenied: ("permission_denied", "Permission denied"),
    exceptions.NotFound: ("not_found", "Not found"),
    exceptions.MethodNotAllowed: ("method_not_allowed", "Method not allowed"),
    exceptions.NotAcceptable: ("not_acceptable", "Not acceptable"),
    exceptions.UnsupportedMediaType: ("unsupported_media_type", "Unsupported media type"),
    exceptions.Throttled: ("throttled", "Too many requests"),
}


def problem(
    *, status_code: int, code: str, title: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    body = {
        "type": PROBLEM_TYPE + code,
        "title": title,
        "status": status_code,
        "detail": detail,
        "code": code,
        **extra,
    }
    return Response(body, status=status_code, headers=headers, content_type=CONTENT_TYPE)


def retry_after_header(when: Any) -> dict[str, str]:
    if when is None:
        return {}
    seconds = max(1, int((when - timezone.now()).total_seconds() + 0.999))
    return {"Retry-After": str(seconds)}


def _validation_errors(detail: Any, prefix: str = "") -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = safe_field_name(key)  # an unknown field's name is the sender's text
            field = f"{prefix}.{name}" if prefix else name
            if key == "non_field_errors":
                field = prefix or "body"
            errors.extend(_validation_errors(value, field))
    elif isinstance(detail, list):
        for item in detail:
            errors.extend(_validation_errors(item, prefix))
    else:
        rule = getattr(detail, "code", "invalid")
        errors.append({"field": prefix or "body", "rule": rule})
    return errors


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, AttemptRefused):
        from envelopes.presenters import step_representation

        return problem(
            status_code=exc.status,
            code=exc.code,
            title=exc.title,
            detail=exc.detail,
            headers=retry_after_header(exc.retry_after),
            step=step_representation(exc.step, directive_reason=exc.code) if exc.step else None,
            directive=exc.directive,
            **({"rule": exc.rule} if exc.rule is not None else {}),
        )
    if isinstance(exc, EnvelopeInvalid):
        return problem(status_code=exc.status, code=exc.code, title=exc.title, detail=exc.detail, errors=exc.errors)
    if isinstance(exc, HoldpointError):
        return problem(
            status_code=exc.status,
            code=exc.code,
            title=exc.title,
            detail=exc.detail,
            headers=getattr(exc, "headers", None),  # Retry-After on the idempotency in-flight 409
            **exc.extra,
        )
    if outage.database_unavailable(exc):
        # A database outage is the service's, not the caller's: try again shortly (config/outage.py).
        outage.note(exc)
        return problem(
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            code=outage.CODE,
            title=outage.TITLE,
            detail=outage.DETAIL,
            headers=outage.retry_after(),
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    if isinstance(exc, exceptions.ValidationError):
        return problem(
            status_code=status.HTTP_422_UNPROCESSABLE_ENTITY,
            code="schema_invalid",
            title="The request body breaks the schema",
            detail="See errors for each field.",
            errors=_validation_errors(exc.detail),
        )
    if isinstance(exc, exceptions.APIException):
        code, title = _DRF_CODES.get(type(exc), (exc.default_code, str(exc.default_detail)))
        headers: dict[str, str] = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
        if getattr(exc, "wait", None) is not None:
            headers["Retry-After"] = str(max(1, int(exc.wait + 0.999)))  # type: ignore[attr-defined]
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return problem(status_code=exc.status_code, code=code, title=title, detail=detail, headers=headers)
    return None


@csrf_exempt
def api_not_found(request: Any, rest: str = "") -> Any:
    """Any unknown path under /api/ answers problem+json, like the known ones."""
    from django.http import JsonResponse

    return JsonResponse(
        {
            "type": PROBLEM_TYPE + "not_found",
            "title": "Not found",
            "status": 404,
            "detail": "No such API resource.",
            "code": "not_found",
        },
        status=404,
        content_type=CONTENT_TYPE,
    )
