/**
 * The HTTP transport `Holdpoint` and `Reviewer` share: the base URL and token checks, the API
 * paths, and `send` (timeouts, retries of what is safe to repeat, typed errors from problem+json,
 * the contract's shape checked on every error answer).
 */

import type { ReportSuccess } from "./background.js";
import {
  AttemptRefused,
  HoldpointError,
  HoldpointUnavailable,
  IdempotencyRequestInFlight,
  InvalidArgument,
  InvalidResponse,
  errorFromProblem,
  isRecord,
} from "./errors.js";
import { traceHeaders } from "./tracing.js";
import { neverSent, parseRetryAfter } from "./envelopes.js";
import { checkDirective, checkStep } from "./shape.js";

export const VERSION = "0.1.0";

export type Dialect = "canonical" | "compact" | "mcp";
export const CONTENT_TYPES: Record<Dialect, string> = {
  canonical: "application/json",
  compact: 'application/json; profile="compact"',
  mcp: 'application/json; profile="mcp"',
};
/** Answers worth another try of a request that is safe to repeat. */
const RETRY_STATUSES = new Set([502, 503, 504]);
/** Seconds: a longer Retry-After is the caller's to honour, not ours. */
const MAX_RETRY_WAIT_S = 30;
const TOKEN = /^[A-Za-z0-9_\-.~+/=]+$/;

export interface ClientOptions {
  /** Milliseconds per request (default 10 000). */
  timeoutMs?: number;
  /** Extra tries of a request that is safe to repeat (default 2). */
  maxRetries?: number;
  /** Milliseconds a failure without a delay of its own waits (default 30 000). */
  defaultRetryDelayMs?: number;
  /** Another fetch (a test double, a proxy agent's); default the global one. */
  fetch?: typeof fetch;
  /** "after": a guard returns a success at once and posts its envelope in the background
   * (see background.ts; `close()` flushes); default "before". A guard's option overrides it. */
  reportSuccess?: ReportSuccess;
  /** At most this many success reports queued (default 1 000); past it, a report is posted at once. */
  reportQueueSize?: number;
}

export interface RequestOptions {
  signal?: AbortSignal;
}

export interface Call {
  method: "GET" | "POST";
  path: string;
  params?: Record<string, string | number | undefined | null>;
  body?: unknown;
  headers?: Record<string, string>;
  /** Safe to send twice (a read, or a write with an Idempotency-Key). */
  idempotent: boolean;
  expect: number[];
  signal?: AbortSignal | undefined;
}

export interface Answer {
  status: number;
  headers: Headers;
  json: unknown;
}

/** The API path of a step; the operation_ref is URL-encoded (`run_81%2Fstep_4`). */
export function stepPath(operationRef: string): string {
  return "/api/v1/steps/" + encodeURIComponent(operationRef);
}

export function teamPath(team: string): string {
  return "/api/v1/teams/" + encodeURIComponent(team);
}

export function teamStepPath(team: string, operationRef: string): string {
  return teamPath(team) + "/steps/" + encodeURIComponent(operationRef);
}

export function checkBaseUrl(baseUrl: unknown): string {
  if (typeof baseUrl !== "string") throw new InvalidArgument("baseUrl is the Holdpoint URL, a string", "baseUrl");
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new InvalidArgument(`baseUrl ${JSON.stringify(baseUrl)} is not a URL`, "baseUrl");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new InvalidArgument(`baseUrl must be http or https; got ${url.protocol}`, "baseUrl");
  }
  if (url.username || url.password) throw new InvalidArgument("baseUrl must not carry credentials: pass the key", "baseUrl");
  if (url.search || url.hash) throw new InvalidArgument("baseUrl has no query or fragment", "baseUrl");
  let root = url.toString().replace(/\/+$/, "");
  if (root.endsWith("/api/v1")) root = root.slice(0, -"/api/v1".length);
  return root;
}

export function checkKey(key: unknown, prefix: string, what: string, field: string): string {
  if (typeof key !== "string" || !key.startsWith(prefix) || key.length <= prefix.length || !TOKEN.test(key)) {
    throw new InvalidArgument(`${what} (${prefix}...) is required; got ${typeof key === "string" ? "a string that is not one" : typeof key}`, field);
  }
  return key;
}

/** The request's own timeout joined with the caller's signal (AbortSignal.any needs 20.3). */
function boundedSignal(timeoutMs: number, outer: AbortSignal | undefined): { signal: AbortSignal; done(): void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException(`no answer within ${timeoutMs} ms`, "TimeoutError")), timeoutMs);
  const onAbort = (): void => controller.abort(outer?.reason);
  if (outer?.aborted) onAbort();
  else outer?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: controller.signal,
    done: () => {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    },
  };
}

export function jitter(value: number, spread: number): number {
  return value * (1 - spread + Math.random() * 2 * spread);
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The shared transport of `Holdpoint` and `Reviewer`. */
export class Transport {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  private readonly authorization: string;
  private readonly fetchFn: typeof fetch;

  constructor(baseUrl: string, token: string, options: ClientOptions) {
    this.baseUrl = baseUrl;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxRetries = options.maxRetries ?? 2;
    this.authorization = `Bearer ${token}`;
    this.fetchFn = options.fetch ?? globalThis.fetch;
    if (typeof this.fetchFn !== "function") throw new InvalidArgument("no global fetch: Node 20 or newer is needed", "fetch");
  }

  private url(call: Call): string {
    const url = new URL(this.baseUrl + call.path);
    for (const [key, value] of Object.entries(call.params ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    return url.toString();
  }

  private retryWait(call: Call, tryNumber: number, status: number | null, headers: Headers | null): number | null {
    if (tryNumber >= this.maxRetries) return null;
    const backoff = jitter(Math.min(500 * 2 ** tryNumber, 8000), 0.2);
    if (status === null) return backoff;
    if (!call.idempotent || !RETRY_STATUSES.has(status)) return null;
    const asked = parseRetryAfter(headers?.get("Retry-After"));
    if (asked !== null && asked > MAX_RETRY_WAIT_S) return null;
    return Math.max(backoff, (asked ?? 0) * 1000);
  }

  async send(call: Call): Promise<Answer> {
    const body = call.body === undefined ? undefined : JSON.stringify(call.body);
    const headers: Record<string, string> = {
      Authorization: this.authorization,
      Accept: "application/json, application/problem+json",
      "User-Agent": `holdpoint-sdk-js/${VERSION}`,
      ...(await traceHeaders()),
      ...(call.headers ?? {}),
    };
    if (body !== undefined && !("Content-Type" in headers)) headers["Content-Type"] = "application/json";
    for (let tryNumber = 0; ; tryNumber++) {
      if (call.signal?.aborted) throw this.aborted(call.signal);
      let response: Response;
      const bounded = boundedSignal(this.timeoutMs, call.signal);
      try {
        response = await this.fetchFn(this.url(call), {
          method: call.method,
          headers,
          body,
          redirect: "manual",
          signal: bounded.signal,
        });
      } catch (error) {
        bounded.done();
        if (call.signal?.aborted) throw this.aborted(call.signal);
        const wait = this.retryWait(call, tryNumber, null, null);
        if (wait === null || !(call.idempotent || neverSent(error))) throw this.unavailable(error);
        await sleep(wait, call.signal);
        continue;
      }
      try {
        if (call.expect.includes(response.status)) {
          return { status: response.status, headers: response.headers, json: await this.json(response) };
        }
        if (response.status < 400) {
          // A 2xx other than the contract's, or a redirect: not Holdpoint's API at this URL.
          const location = response.headers.get("Location");
          throw new InvalidResponse(
            `Holdpoint answered ${response.status}${location ? ` (redirected to ${location}: check baseUrl)` : ""} where the contract says ${call.expect.join(" or ")}`,
            { code: "invalid_response", status: response.status, missing: `status ${call.expect.join("|")}` },
          );
        }
        const error = await this.error(response);
        let wait = this.retryWait(call, tryNumber, response.status, response.headers);
        if (error instanceof IdempotencyRequestInFlight && call.idempotent && tryNumber < this.maxRetries) {
          // The first request with this key is still running: its Retry-After is authoritative
          // (seed 004), and the replay then gets the first one's stored answer.
          const asked = error.retryAfter ?? 1;
          wait = asked <= MAX_RETRY_WAIT_S ? asked * 1000 : null;
        }
        if (wait === null) throw error;
        await sleep(wait, call.signal);
      } finally {
        bounded.done();
      }
    }
  }

  private aborted(signal: AbortSignal): HoldpointError {
    return new HoldpointUnavailable("the request was aborted", { code: "aborted", status: null, cause: signal.reason });
  }

  private unavailable(error: unknown): HoldpointUnavailable {
    const name = error instanceof Error ? (error.cause instanceof Error ? `${error.name}: ${error.cause.message}` : error.name) : typeof error;
    return new HoldpointUnavailable(`no answer from Holdpoint (${name})`, { code: "unavailable", status: null, cause: error });
  }

  private async json(response: Response): Promise<unknown> {
    if (response.status === 304) return null;
    const text = await response.text().catch((error: unknown) => {
      throw new InvalidResponse(`Holdpoint's answer could not be read (${String(error)})`, { code: "invalid_response", status: response.status, missing: "body", cause: error });
    });
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new InvalidResponse(`Holdpoint's ${response.status} answer is not JSON (${response.headers.get("Content-Type") ?? "no Content-Type"})`, {
        code: "invalid_response",
        status: response.status,
        missing: "body",
      });
    }
  }

  private async error(response: Response): Promise<HoldpointError> {
    let problem: unknown = null;
    try {
      problem = JSON.parse(await response.text());
    } catch {
      problem = null;
    }
    const retryAfter = parseRetryAfter(response.headers.get("Retry-After"));
    const error = errorFromProblem(response.status, isRecord(problem) ? problem : null, retryAfter, `HTTP ${response.status} from Holdpoint`);
    if (error instanceof AttemptRefused) {
      // A refusal's step and directive are read by the guard: they must have the shape too.
      if (error.step !== null) checkStep(error.step, "problem.step", response.status);
      if (isRecord(error.problem["directive"])) checkDirective(error.directive, "problem.directive", response.status);
    }
    return error;
  }
}

export function nextParams(next: string | null): Record<string, string> | null {
  if (!next) return null;
  let url: URL;
  try {
    url = new URL(next, "http://next.invalid");
  } catch {
    throw new InvalidResponse("the page's next link is not a URL", { code: "invalid_response", status: 200, missing: "answer.next" });
  }
  return Object.fromEntries(url.searchParams.entries());
}
