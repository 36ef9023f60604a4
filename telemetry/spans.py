"""Spans through the OpenTelemetry SDK, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (contract §13).

With it, each process (a web worker, a Celery worker) builds one TracerProvider the first time it
makes a span: a BatchSpanProcessor hands finished spans to a thread of its own, which sends them
in batches to `{endpoint}/v1/traces` (OTLP over HTTP, protobuf), so no request waits for the
collector. The SDK's own OTEL_BSP_* variables tune the batches; OTEL_SERVICE_NAME names the
service (default `holdpoint`).

Without it, nothing of the SDK is imported and every helper here answers `NOOP`, a shared object
whose methods do nothing: the cost is a settings read per helper call.

The spans Holdpoint makes: the API call (`middleware`, a child of the agent's span when the call
carries a traceparent), the gate verdict and the transition (children of the API call's span, or
of whatever span is current), and in the worker a webhook try and a notification send, each a
new trace *linked* to the traces of the steps it is about (`worker_span`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from django.conf import settings

from .traceparent import TraceParent

Attributes = Mapping[str, str | bool | int | float]

# Attribute names (OpenTelemetry's semantic conventions where one exists, else holdpoint.*).
STEP_REF = "holdpoint.step.operation_ref"
STEP_TOOL = "holdpoint.step.tool"
STATE_BEFORE = "holdpoint.step.state.before"
STATE_AFTER = "holdpoint.step.state"
REASON = "holdpoint.step.reason"
CAUSE = "holdpoint.transition.cause"
ACTOR = "holdpoint.actor"
VERDICT = "holdpoint.gate.verdict"  # "granted" or the refusal code (§4)
# The rule that decided a gate verdict (§11), when one did: `gate_verdict_record(rule=...)`.
VERDICT_RULE_NAME = "holdpoint.gate.rule.name"
VERDICT_RULE_VERSION = "holdpoint.gate.rule.version"


class _NoopSpan:
    """What every helper answers without an endpoint: a span, a context manager of itself."""

    __slots__ = ()

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Attributes) -> None:
        return None

    def update_name(self, name: str) -> None:
        return None

    def end(self) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NOOP = _NoopSpan()


def enabled() -> bool:
    return bool(settings.OTEL_EXPORTER_OTLP_ENDPOINT)


_lock = threading.Lock()
_tracers: dict[str, Any] = {}  # endpoint -> the process's tracer for it
_providers: list[Any] = []


def _tracer() -> Any:
    """The process's tracer, its provider and exporter built at the first span (one per process:
    a forked child re-starts the batch thread itself, the SDK's at-fork hook)."""
    endpoint = settings.OTEL_EXPORTER_OTLP_ENDPOINT
    tracer = _tracers.get(endpoint)
    if tracer is not None:
        return tracer
    with _lock:
        if endpoint not in _tracers:
            provider = _provider(endpoint)
            _providers.append(provider)
            _tracers[endpoint] = provider.get_tracer("holdpoint")
        return _tracers[endpoint]


def _provider(endpoint: str) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Holdpoint's name unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) gives another.
    resource = Resource.create({"service.name": "holdpoint"}).merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)
    # The signal's path appended to the base endpoint, as the OTLP exporter specification says
    # for OTEL_EXPORTER_OTLP_ENDPOINT.
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def flush(timeout_ms: int = 5000) -> None:
    """Send what the batch holds now (a worker about to exit; the tests)."""
    for provider in list(_providers):
        provider.force_flush(timeout_ms)


def _remote_parent(parent: TraceParent) -> Any:
    from opentelemetry import trace

    state = trace.TraceState.from_header([parent.tracestate]) if parent.tracestate else None
    context = trace.SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.parent_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(parent.flags & 0xFF),
        trace_state=state,
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(context))


def server_span(name: str, *, parent: TraceParent | None, attributes: Attributes) -> AbstractContextManager[Any]:
    """The span of one API call, current while it runs: a child of the caller's span when the
    call carried a traceparent (the agent's trace id, its span as our parent), else a root."""
    if not enabled():
        return NOOP
    from opentelemetry.trace import SpanKind

    context = _remote_parent(parent) if parent is not None else None
    return _tracer().start_as_current_span(  # type: ignore[no-any-return]
        name, context=context, kind=SpanKind.SERVER, attributes=attributes
    )


def span(name: str, attributes: Attributes | None = None) -> AbstractContextManager[Any]:
    """A span, a child of the current one, current while it runs."""
    if not enabled():
        return NOOP
    return _tracer().start_as_current_span(name, attributes=attributes)  # type: ignore[no-any-return]


def span_start(name: str, attributes: Attributes | None = None) -> Any:
    """A span started now, a child of the current one, not made current; the caller `end()`s it
    (one that is never ended is never exported)."""
    if not enabled():
        return NOOP
    return _tracer().start_span(name, attributes=attributes)


def gate_verdict_record(span: Any, *, verdict: str, rule: tuple[str, int] | None = None) -> None:
    """The attempt gate's verdict on its span. `rule`: (name, version) of the rule that decided
    (§11), for the rules' code to pass; None when no rule did."""
    if span is NOOP:
        return
    span.set_attribute(VERDICT, verdict)
    if rule is not None:
        span.set_attribute(VERDICT_RULE_NAME, rule[0])
        span.set_attribute(VERDICT_RULE_VERSION, rule[1])


@contextmanager
def _linked(name: str, traces: Iterable[tuple[str, str]], attributes: Attributes) -> Iterator[Any]:
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    links = []
    for trace_id, parent_id in traces:
        if trace_id and parent_id:
            linked = trace.SpanContext(
                trace_id=int(trace_id, 16), span_id=int(parent_id, 16), is_remote=True, trace_flags=trace.TraceFlags(1)
            )
            links.append(trace.Link(linked))
    # A root of its own: the worker's task is not part of any one request's trace.
    with _tracer().start_as_current_span(
        name, context=otel_context.Context(), kind=trace.SpanKind.CLIENT, attributes=attributes, links=links
    ) as current:
        yield current


def worker_span(
    name: str, *, traces: Callable[[], Iterable[tuple[str, str]]], attributes: Attributes | None = None
) -> AbstractContextManager[Any]:
    """A span of the worker's (a webhook try, a notification send), a new trace linked to the
    traces of the steps it is about: `traces()` gives their (trace_id, parent_id) pairs, and is
    only called with an endpoint set (it may read the database)."""
    if not enabled():
        return NOOP
    return _linked(name, traces(), attributes or {})
