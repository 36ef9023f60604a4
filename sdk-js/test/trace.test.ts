/**
 * The SDK sends the agent's W3C trace context (contract §13) when the agent uses OpenTelemetry:
 * `@opentelemetry/api` (an optional peer dependency) with a context manager, as an agent's
 * OpenTelemetry set-up registers one. Its own process (node --test), so the global context
 * manager set here reaches no other test.
 */

import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { after, before, describe, it } from "node:test";

import { type Context, type ContextManager, ROOT_CONTEXT, TraceFlags, context, createTraceState, trace } from "@opentelemetry/api";

import { Holdpoint } from "../src/index.js";
import { fakeFetch, json, step } from "./support/fake-fetch.js";

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN_ID = "00f067aa0ba902b7";

/** What an agent's OpenTelemetry set-up registers (the Node SDK's AsyncLocalStorage manager), in brief. */
class AsyncLocalStorageManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.storage.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.storage.disable();
    return this;
  }
}

describe("trace context", () => {
  before(() => {
    context.setGlobalContextManager(new AsyncLocalStorageManager());
  });
  after(() => {
    context.disable();
  });

  it("sends the current span's traceparent and tracestate with every call", async () => {
    const { fetch, sent } = fakeFetch(() => json(200, step()));
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
    const spanContext = { traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: TraceFlags.SAMPLED, traceState: createTraceState("vendor=x") };
    await context.with(trace.setSpanContext(context.active(), spanContext), async () => {
      await hp.getStep("op_1");
      await hp.getStep("op_1"); // after an await: still the agent's context
    });
    assert.equal(sent[0]?.headers["traceparent"], `00-${TRACE_ID}-${SPAN_ID}-01`);
    assert.equal(sent[0]?.headers["tracestate"], "vendor=x");
    assert.equal(sent[1]?.headers["traceparent"], `00-${TRACE_ID}-${SPAN_ID}-01`);
  });

  it("sends nothing outside a span, or for an invalid span context", async () => {
    const { fetch, sent } = fakeFetch(() => json(200, step()));
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
    await hp.getStep("op_1");
    const invalid = { traceId: "0".repeat(32), spanId: SPAN_ID, traceFlags: TraceFlags.SAMPLED };
    await context.with(trace.setSpanContext(context.active(), invalid), () => hp.getStep("op_1"));
    assert.equal(sent[0]?.headers["traceparent"], undefined);
    assert.equal(sent[1]?.headers["traceparent"], undefined);
  });
});
