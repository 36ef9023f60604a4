"""Liveness and readiness for load balancers and orchestrators.

/readyz checks the database, the broker and the cache. The cache is reported but does not make
the instance unready: nothing a request needs lives only there (the throttle lets calls through
while a Redis cache is down, and its windows and one-time claims otherwise have their own
tables), so taking every instance out of a load balancer for it would turn a degraded service
into an outage.
"""

from __future__ import annotations

from django.core.cache import cache
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
    try:
        cache.get("holdpoint:readyz")  # one round trip: the table exists, or Redis answers
        checks["cache"] = "ok"
    except Exception as error:
        checks["cache"] = f"error: {type(error).__name__}"
    status = "unavailable" if not ready else "ok" if checks["cache"] == "ok" else "degraded"
    return JsonResponse({"status": status, **checks}, status=200 if ready else 503)
