"""Liveness and readiness for load balancers and orchestrators."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.celery import app as celery_app


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as error:
        checks["database"] = f"error: {type(error).__name__}"
    try:
        with celery_app.connection_for_write() as broker:
            broker.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as error:
        checks["broker"] = f"error: {type(error).__name__}"
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", **checks}, status=200 if ready else 503)
