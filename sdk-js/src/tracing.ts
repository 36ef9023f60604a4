/**
 * W3C trace context on every call to Holdpoint (contract §13), so that a held step links to the
 * agent's trace: when the agent uses OpenTelemetry, the current span's `traceparent` (and
 * `tracestate`). `@opentelemetry/api` is an optional peer dependency, looked for once per
 * process: without it, or without a current valid span, nothing is sent.
 */

interface SpanContextLike {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: { serialize(): string };
}

/** The part of `@opentelemetry/api` used here (its own types are not needed to build). */
interface OtelApiLike {
  context: { active(): unknown };
  trace: { getSpanContext(context: unknown): SpanContextLike | undefined };
  isSpanContextValid(spanContext: SpanContextLike): boolean;
}

// A name in a variable: bundlers leave an optional dependency alone instead of failing on it.
const OTEL_API = "@opentelemetry/api";
let found: OtelApiLike | null | undefined;
let looking: Promise<OtelApiLike | null> | undefined;

function otelApi(): Promise<OtelApiLike | null> {
  looking ??= (import(OTEL_API) as Promise<OtelApiLike>).then(
    (api) => (found = typeof api?.trace?.getSpanContext === "function" ? api : null),
    () => (found = null),
  );
  return looking;
}

/** The current OpenTelemetry span's trace context as headers; {} when there is none. */
export async function traceHeaders(): Promise<Record<string, string>> {
  const api = found !== undefined ? found : await otelApi();
  if (api === null) return {};
  const spanContext = api.trace.getSpanContext(api.context.active());
  if (spanContext === undefined || !api.isSpanContextValid(spanContext)) return {};
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, "0");
  const headers: Record<string, string> = { traceparent: `00-${spanContext.traceId}-${spanContext.spanId}-${flags}` };
  const state = spanContext.traceState?.serialize();
  if (state) headers["tracestate"] = state;
  return headers;
}
