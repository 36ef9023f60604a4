"""Trace context and OpenTelemetry spans (contract §13), below every app.

`traceparent`: the W3C `traceparent`/`tracestate` an API call carries, parsed (a malformed one is
ignored), and the one this request carries (`incoming`), set by `middleware`. `spans`: spans
through the OpenTelemetry SDK, exported in batches to `OTEL_EXPORTER_OTLP_ENDPOINT`; without that
setting no SDK module is imported and every span helper answers a shared no-op at once.

Nothing here knows a model: callers hand in the trace ids they stored (a step's `trace_id`).
"""
