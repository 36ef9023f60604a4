"""W3C trace context on every call to Holdpoint (contract §13), so that a held step links to
the agent's trace.

Sent, in this order of preference:
1. the `traceparent` (and `tracestate`) given for the calls made inside `trace_context(...)`:
   holdpoint-mcp passes the MCP client's `_meta.traceparent` this way;
2. the current OpenTelemetry span's, when the agent uses OpenTelemetry. `opentelemetry-api` is
   an optional import: without it (or without a current, valid span) nothing is sent, and the
   SDK needs nothing more than it did.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# What may be passed on as it is: W3C's shapes, printable ASCII, no CR or LF (header injection).
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[\x21-\x7e]*)?")
_TRACESTATE = re.compile(r"[\x20-\x7e]{1,512}")

_given: ContextVar[dict[str, str] | None] = ContextVar("holdpoint_sdk_trace_context", default=None)


@contextmanager
def trace_context(traceparent: Any, tracestate: Any = None) -> Iterator[None]:
    """Send this `traceparent` (a W3C header value) with the calls made inside; a value that is
    not one is ignored (the calls then carry the OpenTelemetry span's, if any)."""
    headers: dict[str, str] | None = None
    if isinstance(traceparent, str) and _TRACEPARENT.fullmatch(traceparent):
        headers = {"traceparent": traceparent}
        if isinstance(tracestate, str) and _TRACESTATE.fullmatch(tracestate):
            headers["tracestate"] = tracestate
    token = _given.set(headers) if headers is not None else None
    try:
        yield
    finally:
        if token is not None:
            _given.reset(token)


@functools.cache
def _otel_inject() -> Callable[[dict[str, str]], None] | None:
    """The W3C propagator's inject over the current OpenTelemetry context, or None without
    opentelemetry-api (looked for once per process)."""
    try:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        return None
    propagator = TraceContextTextMapPropagator()
    return lambda carrier: propagator.inject(carrier)


def trace_headers(headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """`headers` with the current trace context added (unchanged when there is none)."""
    found = _given.get()
    if found is None:
        inject = _otel_inject()
        if inject is None:
            return headers
        carrier: dict[str, str] = {}
        inject(carrier)  # nothing without a current, valid span
        if not carrier:
            return headers
        found = carrier
    return {**(headers or {}), **found}
