"""The trace context of every request (contract §13): a `traceparent` (and its `tracestate`)
parsed and kept for the request (`traceparent.incoming`: the core stores its trace id with what
the call writes), and with an OTLP endpoint the request's server span, a child of the caller's."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from . import spans
from .traceparent import incoming_reset, incoming_set, traceparent_parse

Handler = Callable[[HttpRequest], HttpResponseBase]


def TraceContextMiddleware(get_response: Handler) -> Handler:
    def middleware(request: HttpRequest) -> HttpResponseBase:
        header = request.META.get("HTTP_TRACEPARENT")
        trace = traceparent_parse(header, request.META.get("HTTP_TRACESTATE")) if header else None
        token = incoming_set(trace) if trace is not None else None
        try:
            if not spans.enabled():
                return get_response(request)
            attributes = {"http.request.method": request.method or "", "url.path": request.path}
            with spans.server_span(request.method or "HTTP", parent=trace, attributes=attributes) as span:
                response = get_response(request)
                route = getattr(request.resolver_match, "route", None)
                if route:
                    span.update_name(f"{request.method} /{route}")
                    span.set_attribute("http.route", f"/{route}")
                span.set_attribute("http.response.status_code", response.status_code)
                return response
        finally:
            if token is not None:
                incoming_reset(token)

    return middleware
