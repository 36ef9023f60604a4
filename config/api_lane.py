"""The agent API's lane through the middleware: what only the pages need is skipped for /api/v1/.

An agent pays for every call twice (the attempt gate, then the envelope), so the middleware
that serves the reviewers' pages is not run for the agent API: sessions, CSRF, the user,
messages, the CSP header (which protects HTML) and htmx details. None of them can matter
there: API views authenticate by API key only (no session, no cookie, so nothing for CSRF to
protect; DRF's views are csrf_exempt anyway), render JSON, and never log anyone in. The
security headers the API must carry stay: SecurityMiddleware (HSTS, nosniff,
Referrer-Policy, the HTTPS redirect), X-Frame-Options, and CommonMiddleware's
Content-Length. django-axes' middleware stays as it is (its check looks for it by name; it
only reads one attribute of a request that no login touched).

Each class here is the library's own middleware (a subclass, so Django's checks still find
it), run as usual for every other path.
"""

from __future__ import annotations

from typing import Any

from csp.middleware import CSPMiddleware as _CSPMiddleware
from django.contrib.auth.middleware import AuthenticationMiddleware as _AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as _MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as _SessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware as _CsrfViewMiddleware
from django_htmx.middleware import HtmxMiddleware as _HtmxMiddleware

API_PREFIX = "/api/v1/"


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def _pages_only(base: type[Any]) -> type[Any]:
    """`base`, skipped for the agent API: its __call__ and its view hook pass straight on."""

    class PagesOnly(base):  # type: ignore[misc,valid-type]
        def __call__(self, request: HttpRequest) -> HttpResponseBase:
            if is_api(request):
                return self.get_response(request)  # type: ignore[no-any-return]
            return super().__call__(request)  # type: ignore[no-any-return]

        if hasattr(base, "process_view"):

            def process_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase | None:
                if is_api(request):
                    return None
                return super().process_view(request, *args, **kwargs)  # type: ignore[no-any-return]

    PagesOnly.__name__ = PagesOnly.__qualname__ = base.__name__
    PagesOnly.__doc__ = f"{base.__module__}.{base.__name__}, not run for {API_PREFIX}."
    return PagesOnly


SessionMiddleware = _pages_only(_SessionMiddleware)
CsrfViewMiddleware = _pages_only(_CsrfViewMiddleware)
AuthenticationMiddleware = _pages_only(_AuthenticationMiddleware)
MessageMiddleware = _pages_only(_MessageMiddleware)
CSPMiddleware = _pages_only(_CSPMiddleware)
HtmxMiddleware = _pages_only(_HtmxMiddleware)
