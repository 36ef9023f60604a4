"""What a request answers while the database cannot be reached: 503 with Retry-After, never 500.

A PostgreSQL restart, failover or a full connection slot makes every statement fail for a while
with a connection error. That is the service being unavailable, not a bug: the API answers 503
problem+json (`database_unavailable`, through `envelopes.apikit.problems`' handler) and every other
page a plain 503, both with Retry-After, so agents and browsers try again instead of reporting
a failure. The dead connection is closed by Django at the request's end (it is no longer
usable), and the next request opens a new one: service resumes with the first request after
the database is back.

Only connection-level failures count (no connection, one the server closed or is refusing:
SQLSTATE class 08, 57P01-57P03); any other database error is still a 500, as a bug should be.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from django import db
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

logger = logging.getLogger("holdpoint.outage")

RETRY_AFTER_S = 2
WARN_EVERY_S = 10.0
CODE = "database_unavailable"

# admin_shutdown, crash_shutdown, cannot_connect_now (starting up, shutting down, in recovery).
_UNAVAILABLE_SQLSTATES = {"57P01", "57P02", "57P03"}

_last_warning = [0.0]


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether `exc` says the database cannot be reached (rather than a statement was wrong)."""
    if isinstance(exc, db.InterfaceError):  # "connection already closed"
        return True
    if not isinstance(exc, db.OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", "")  # psycopg's; SQLite's errors have none
    if sqlstate is None:  # psycopg's error without a server's answer: refused, closed, reset
        return True
    return sqlstate.startswith("08") or sqlstate in _UNAVAILABLE_SQLSTATES


def retry_after() -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_S)}


def note(exc: BaseException) -> None:
    """Log the outage, at most once every WARN_EVERY_S per process (not a traceback a request)."""
    now = time.monotonic()
    if now - _last_warning[0] >= WARN_EVERY_S or _last_warning[0] == 0.0:
        _last_warning[0] = now
        logger.warning("the database cannot be reached (%s: %s); answering 503", type(exc).__name__, exc)


TITLE = "The database is unavailable"
DETAIL = "Holdpoint cannot reach its database just now; try again after Retry-After seconds."
PROBLEM = {
    "type": "https://holdpoint.dev/problems/" + CODE,
    "title": TITLE,
    "status": 503,
    "detail": DETAIL,
    "code": CODE,
}

PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Holdpoint is unavailable</title>"
    "<h1>Holdpoint is unavailable</h1>"
    "<p>Holdpoint cannot reach its database just now. Try again in a few seconds.</p></html>"
)


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Django's handler500: 503 when the exception being handled is the database's outage
    (the API's problem+json under /api/, a plain page elsewhere), else Django's own 500."""
    exc = sys.exc_info()[1]
    if not database_unavailable(exc):
        return defaults.server_error(request, *args, **kwargs)
    assert exc is not None
    note(exc)
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse(PROBLEM, status=503, content_type="application/problem+json")
    else:
        response = HttpResponse(PAGE, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    # Logged above, once in a while: Django would log each one with its traceback at ERROR.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
