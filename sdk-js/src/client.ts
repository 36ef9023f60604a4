/**
 * The client for the Holdpoint API (contract §4) and the reviewer API (§10), on the global
 * `fetch` of Node 20+.
 *
 *   const hp = new Holdpoint("https://holdpoint.example", "hp_...");
 *   const outcome = await hp.guard("create_invoice", invoice, (input) => provider.createInvoice(input));
 *
 * Reads, and writes carrying an Idempotency-Key, are sent again on 502/503/504 and on a lost
 * connection (at most `maxRetries` times); a write without one only when it never left this
 * process. Every error answer becomes a typed `HoldpointError`; every answer is checked for
 * the contract's shape first (`InvalidResponse` names what is missing).
 */

import { checkMode, DEFAULT_QUEUE_SIZE, FLUSH_TIMEOUT_MS, ReportQueue, type ReportSuccess } from "./background.js";
import {
  AttemptRefused,
  DecisionTimeout,
  HoldpointError,
  HoldpointUnavailable,
  IdempotencyRequestInFlight,
  InvalidArgument,
  InvalidResponse,
  errorFromProblem,
  isRecord,
} from "./errors.js";
import { traceHeaders } from "./tracing.js";
import { checkOperationRef, checkToolName, neverSent, parseRetryAfter, parseTime, rfc3339, toJsonValue } from "./envelopes.js";
import {
  checkCodes,
  checkDecisionAnswer,
  checkDirective,
  checkGrant,
  checkIngest,
  checkObject,
  checkPage,
  checkSkipped,
  checkStep,
  checkStepAnswer,
} from "./shape.js";
import type {
  Action,
  AttemptGrant,
  CodeList,
  DecisionAction,
  DecisionAnswer,
  IngestAnswer,
  JsonObject,
  Metrics,
  QueueKind,
  Skipped,
  Step,
  StepAnswer,
  StepPage,
  VerificationOutcome,
} from "./types.js";
import { runGuard, type GuardOptions, type Outcome, type ToolRun } from "./guard.js";

export const VERSION = "0.1.0";

export type Dialect = "canonical" | "compact" | "mcp";
const CONTENT_TYPES: Record<Dialect, string> = {
  canonical: "application/json",
  compact: 'application/json; profile="compact"',
  mcp: 'application/json; profile="mcp"',
};
/** Answers worth another try of a request that is safe to repeat. */
const RETRY_STATUSES = new Set([502, 503, 504]);
/** A hold, a verification or a wait ends by someone else's act (or a timer): keep polling. */
export const WAITING_ACTIONS: ReadonlySet<Action> = new Set<Action>(["hold", "verify", "wait"]);
/** Seconds: a longer Retry-After is the caller's to honour, not ours. */
const MAX_RETRY_WAIT_S = 30;
const MAX_REMEMBERED_APPROVALS = 1024;
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

interface Call {
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

interface Answer {
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

function checkBaseUrl(baseUrl: unknown): string {
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

function checkKey(key: unknown, prefix: string, what: string, field: string): string {
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

function jitter(value: number, spread: number): number {
  return value * (1 - spread + Math.random() * 2 * spread);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
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

/** A conditional read: `step` is null when it did not change since `etag` (304). */
export interface ConditionalStep {
  step: Step | null;
  etag: string | null;
  modified: boolean;
}

export interface WaitOptions {
  /** Give up after this many milliseconds (default one hour): DecisionTimeout. */
  timeoutMs?: number;
  initialIntervalMs?: number;
  maxIntervalMs?: number;
  /** Stop waiting when it aborts: DecisionTimeout with code `aborted`. */
  signal?: AbortSignal;
  waitingActions?: ReadonlySet<Action>;
}

/** The shared transport of `Holdpoint` and `Reviewer`. */
class Transport {
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

/** The agent's client (an API key, `hp_...`). */
export class Holdpoint {
  readonly baseUrl: string;
  readonly defaultRetryDelayMs: number;
  /** @internal */
  readonly transport: Transport;
  // operation_ref -> the input a reviewer approved with edits, as last read in a directive:
  // the next guard on that step runs it instead of its own input.
  private readonly approvedInputs = new Map<string, JsonObject>();

  readonly reportSuccess: ReportSuccess;
  private readonly reports: ReportQueue;

  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    this.baseUrl = checkBaseUrl(baseUrl);
    checkKey(apiKey, "hp_", "an API key", "apiKey");
    this.defaultRetryDelayMs = options.defaultRetryDelayMs ?? 30_000;
    this.transport = new Transport(this.baseUrl, apiKey, options);
    this.reportSuccess = checkMode(options.reportSuccess);
    this.reports = new ReportQueue(
      (report) => this.postEnvelope(report.envelope, { idempotencyKey: report.idempotencyKey }),
      options.reportQueueSize ?? DEFAULT_QUEUE_SIZE,
    );
  }

  /** Queue a success's envelope, posted in the background under `idempotencyKey`. */
  reportLater(envelope: Record<string, unknown>, idempotencyKey: string, operationRef: string): Promise<void> {
    return this.reports.submit({ envelope, idempotencyKey, operationRef });
  }

  /** @internal Wait for this step's queued success report, if any (before its next gate call). */
  async reportsSettled(operationRef: string): Promise<void> {
    if (!(await this.reports.settled(operationRef))) console.warn(`holdpoint: the success report of ${operationRef} is still queued`);
  }

  /** Success reports queued or being posted (reportSuccess "after"). */
  get reportsQueued(): number {
    return this.reports.length;
  }

  /** Wait for the queued success reports; false if some are still queued after `timeoutMs`. */
  flushReports(timeoutMs: number = FLUSH_TIMEOUT_MS): Promise<boolean> {
    return this.reports.flush(timeoutMs);
  }

  /** Flush the queued success reports (at most `timeoutMs`); what is left is given up (its
   * steps will ask for verification). */
  close(timeoutMs: number = FLUSH_TIMEOUT_MS): Promise<void> {
    return this.reports.close(timeoutMs);
  }

  /** The edited input a reviewer approved for this step, as this client last read it in the
   * step's directive (any read), until an attempt uses it; null otherwise. */
  approvedInput(operationRef: string): JsonObject | null {
    const approved = this.approvedInputs.get(operationRef);
    return approved ? structuredClone(approved) : null;
  }

  /** @internal */
  remember(step: Step | null | undefined): void {
    if (!step) return;
    const approved = step.directive.input;
    this.approvedInputs.delete(step.operation_ref);
    if (isRecord(approved)) {
      while (this.approvedInputs.size >= MAX_REMEMBERED_APPROVALS) {
        const first = this.approvedInputs.keys().next().value;
        if (first === undefined) break;
        this.approvedInputs.delete(first);
      }
      this.approvedInputs.set(step.operation_ref, structuredClone(approved));
    }
  }

  /** POST /envelopes: report one tool result. With an Idempotency-Key a lost answer can be
   * asked for again without recording the result twice. */
  async postEnvelope(
    envelope: Record<string, unknown>,
    options: { idempotencyKey?: string; dialect?: Dialect } & RequestOptions = {},
  ): Promise<IngestAnswer> {
    if (!isRecord(envelope)) throw new InvalidArgument("an envelope is a JSON object", "envelope");
    const body = toJsonValue(envelope, "envelope");
    const headers: Record<string, string> = { "Content-Type": CONTENT_TYPES[options.dialect ?? "canonical"] };
    if (options.idempotencyKey) headers["Idempotency-Key"] = options.idempotencyKey;
    const answer = await this.transport.send({
      method: "POST",
      path: "/api/v1/envelopes",
      body,
      headers,
      idempotent: Boolean(options.idempotencyKey),
      expect: [201],
      signal: options.signal,
    });
    const ingest = checkIngest(answer.json, answer.status);
    this.remember(ingest.step);
    return ingest;
  }

  /** The attempt gate: ask before every write. Throws an `AttemptRefused` subclass when
   * refused. `input` is the call's input itself, for the reviewer to see; the server checks it
   * hashes to `inputFingerprint`. */
  async requestAttempt(
    operationRef: string,
    options: {
      tool: string;
      inputFingerprint: string;
      input?: JsonObject | null;
      runId?: string | null;
      correlationId?: string | null;
      idempotencyKey?: string;
    } & RequestOptions,
  ): Promise<AttemptGrant> {
    checkOperationRef(operationRef);
    checkToolName(options.tool);
    if (typeof options.inputFingerprint !== "string" || !/^[0-9a-f]{64}$/.test(options.inputFingerprint)) {
      throw new InvalidArgument("inputFingerprint is a lowercase hex SHA-256", "inputFingerprint");
    }
    const body: Record<string, unknown> = { tool: options.tool, input_fingerprint: options.inputFingerprint };
    if (options.input !== undefined && options.input !== null) body["input"] = toJsonValue(options.input, "input");
    if (options.runId) body["run_id"] = options.runId;
    if (options.correlationId) body["correlation_id"] = options.correlationId;
    const headers: Record<string, string> = {};
    if (options.idempotencyKey) headers["Idempotency-Key"] = options.idempotencyKey;
    let answer: Answer;
    try {
      answer = await this.transport.send({
        method: "POST",
        path: stepPath(operationRef) + "/attempts",
        body,
        headers,
        idempotent: Boolean(options.idempotencyKey),
        expect: [201],
        signal: options.signal,
      });
    } catch (error) {
      if (error instanceof AttemptRefused) this.remember(error.step);
      throw error;
    }
    const grant = checkGrant(answer.json, answer.status);
    this.approvedInputs.delete(operationRef); // a granted attempt used the approval
    this.remember(grant.step);
    return grant;
  }

  /** Report a lookup of the step's write by operation_ref. */
  async reportVerification(
    operationRef: string,
    options: { outcome: VerificationOutcome; checkedAt?: Date; evidenceRef?: string } & RequestOptions,
  ): Promise<StepAnswer> {
    checkOperationRef(operationRef);
    if (!["committed", "not_found", "unavailable"].includes(options.outcome)) {
      throw new InvalidArgument("outcome is committed, not_found or unavailable", "outcome");
    }
    const body: Record<string, unknown> = { outcome: options.outcome, checked_at: rfc3339(options.checkedAt ?? new Date()) };
    if (options.evidenceRef) body["evidence_ref"] = options.evidenceRef;
    // A report is a fact about the world; repeating it changes nothing more.
    const answer = await this.transport.send({
      method: "POST",
      path: stepPath(operationRef) + "/verification",
      body,
      idempotent: true,
      expect: [200],
      signal: options.signal,
    });
    const result = checkStepAnswer(answer.json, answer.status);
    this.remember(result.step);
    return result;
  }

  async getStep(operationRef: string, options: RequestOptions = {}): Promise<Step> {
    const read = await this.getStepIfChanged(operationRef, null, options);
    if (read.step === null) throw new InvalidResponse("a read without If-None-Match answered 304", { code: "invalid_response", status: 304, missing: "body" });
    return read.step;
  }

  /** GET /steps/{ref} with If-None-Match: a 304 costs the server almost nothing. */
  async getStepIfChanged(operationRef: string, etag: string | null, options: RequestOptions = {}): Promise<ConditionalStep> {
    checkOperationRef(operationRef);
    const answer = await this.transport.send({
      method: "GET",
      path: stepPath(operationRef),
      headers: etag ? { "If-None-Match": etag } : {},
      idempotent: true,
      expect: [200, 304],
      signal: options.signal,
    });
    const newEtag = answer.headers.get("ETag") ?? etag;
    if (answer.status === 304) return { step: null, etag: newEtag, modified: false };
    const step = checkStep(answer.json, "answer", answer.status);
    this.remember(step);
    return { step, etag: newEtag, modified: true };
  }

  async listStepsPage(
    options: { state?: string; tool?: string; runId?: string; limit?: number; cursor?: string } & RequestOptions = {},
  ): Promise<StepPage> {
    const params = { state: options.state, tool: options.tool, run_id: options.runId, limit: options.limit, cursor: options.cursor };
    const answer = await this.transport.send({ method: "GET", path: "/api/v1/steps", params, idempotent: true, expect: [200], signal: options.signal });
    return checkPage(answer.json, answer.status);
  }

  /** Every matching step, newest first, following the cursor from page to page (the `next`
   * link's query is replayed on our own base URL: the key never goes to another host). */
  async *listSteps(options: { state?: string; tool?: string; runId?: string; pageSize?: number } & RequestOptions = {}): AsyncGenerator<Step> {
    let params: Record<string, string | number | undefined> | null = {
      state: options.state,
      tool: options.tool,
      run_id: options.runId,
      limit: options.pageSize,
    };
    while (params !== null) {
      const answer = await this.transport.send({ method: "GET", path: "/api/v1/steps", params, idempotent: true, expect: [200], signal: options.signal });
      const page = checkPage(answer.json, answer.status);
      yield* page.results;
      params = nextParams(page.next);
    }
  }

  async toolCodes(tool: string, options: RequestOptions = {}): Promise<CodeList> {
    checkToolName(tool);
    const answer = await this.transport.send({ method: "GET", path: `/api/v1/tools/${encodeURIComponent(tool)}/codes`, idempotent: true, expect: [200], signal: options.signal });
    return checkCodes(answer.json, answer.status);
  }

  async toolMetrics(tool: string, options: { since?: Date | string; until?: Date | string } & RequestOptions = {}): Promise<Metrics> {
    checkToolName(tool);
    const time = (value: Date | string | undefined): string | undefined => (value instanceof Date ? rfc3339(value) : value);
    const answer = await this.transport.send({
      method: "GET",
      path: `/api/v1/tools/${encodeURIComponent(tool)}/metrics`,
      params: { since: time(options.since), until: time(options.until) },
      idempotent: true,
      expect: [200],
      signal: options.signal,
    });
    return checkObject(answer.json, answer.status);
  }

  async runSkipped(runId: string, options: RequestOptions = {}): Promise<Skipped> {
    const answer = await this.transport.send({ method: "GET", path: `/api/v1/runs/${encodeURIComponent(runId)}/skipped`, idempotent: true, expect: [200], signal: options.signal });
    return checkSkipped(answer.json, answer.status);
  }

  /**
   * Poll the step (If-None-Match, exponential backoff with jitter) until its directive is no
   * longer hold / verify / wait, and return it; a `wait` ends at its not_before. Throws
   * `DecisionTimeout` after `timeoutMs`, or when `signal` aborts (code `aborted`).
   */
  async waitForDecision(operationRef: string, options: WaitOptions = {}): Promise<Step> {
    const { timeoutMs = 3_600_000, initialIntervalMs = 1000, maxIntervalMs = 30_000, signal, waitingActions = WAITING_ACTIONS } = options;
    checkOperationRef(operationRef);
    const deadline = Date.now() + timeoutMs;
    let etag: string | null = null;
    let step: Step | null = null;
    let interval = initialIntervalMs;
    for (;;) {
      if (signal?.aborted) throw new DecisionTimeout(`stopped waiting for a decision on ${JSON.stringify(operationRef)}: aborted`, step, "aborted");
      let read: ConditionalStep = { step: null, etag, modified: false };
      try {
        read = await this.getStepIfChanged(operationRef, etag, signal ? { signal } : {});
      } catch (error) {
        if (signal?.aborted) throw new DecisionTimeout(`stopped waiting for a decision on ${JSON.stringify(operationRef)}: aborted`, step, "aborted");
        // Throttled, 5xx and no answer are waited out; anything else is the caller's to see.
        if (!(error instanceof HoldpointError) || (error.status !== null && error.status !== 429 && error.status < 500)) throw error;
        interval = Math.max(interval, (error.retryAfter ?? 0) * 1000);
      }
      if (read.step !== null) {
        if (step !== null && JSON.stringify(read.step.directive) !== JSON.stringify(step.directive)) interval = initialIntervalMs;
        step = read.step;
        etag = read.etag;
      }
      if (step !== null && decided(step, waitingActions, new Date())) return step;
      const left = deadline - Date.now();
      if (left <= 0) throw new DecisionTimeout(`no decision on ${JSON.stringify(operationRef)} within ${timeoutMs} ms`, step);
      let delay = jitter(interval, 0.1);
      if (step !== null && step.directive.action === "wait") {
        const notBefore = parseTime(step.directive.not_before);
        if (notBefore !== null) delay = Math.min(delay, Math.max(notBefore.getTime() - Date.now(), 0));
      }
      try {
        await sleep(Math.max(Math.min(delay, left), 10), signal);
      } catch {
        throw new DecisionTimeout(`stopped waiting for a decision on ${JSON.stringify(operationRef)}: aborted`, step, "aborted");
      }
      interval = Math.min(interval * 2, maxIntervalMs);
    }
  }

  /**
   * Guard one tool call: ask the attempt gate, run `run(input)` only when it says proceed, map
   * the result or the thrown error to an envelope, post it with an Idempotency-Key, and (with
   * `waitForHoldMs`) wait that long for a reviewer's decision on a hold, then run exactly the
   * approved input. See `GuardOptions` and `Outcome`.
   */
  guard<R>(tool: string, input: Record<string, unknown>, run: ToolRun<R>, options: GuardOptions = {}): Promise<Outcome<R>> {
    return runGuard(this, tool, input, run, options);
  }
}

function decided(step: Step, waitingActions: ReadonlySet<Action>, now: Date): boolean {
  const directive = step.directive;
  if (!waitingActions.has(directive.action)) return true;
  if (directive.action === "wait") {
    // Past not_before the attempt gate grants, even before Holdpoint's timer sweep runs.
    const notBefore = parseTime(directive.not_before);
    return notBefore !== null && notBefore.getTime() <= now.getTime();
  }
  return false;
}

function nextParams(next: string | null): Record<string, string> | null {
  if (!next) return null;
  let url: URL;
  try {
    url = new URL(next, "http://next.invalid");
  } catch {
    throw new InvalidResponse("the page's next link is not a URL", { code: "invalid_response", status: 200, missing: "answer.next" });
  }
  return Object.fromEntries(url.searchParams.entries());
}

/** A step as the reviewer read it, with the ETag a decision on that version names. */
export interface ReviewedStep {
  step: Step;
  etag: string;
}

/**
 * The reviewer API (contract §10) with a reviewer token (`hpr_...`, made at /account/tokens/).
 * A decision names the ETag of the step version the reviewer looked at (`If-Match`): if the
 * step changed since, Holdpoint answers 412 (`StepChanged`) and decides nothing. A decision is
 * never sent twice (a lost answer: read the step again).
 */
export class Reviewer {
  readonly baseUrl: string;
  private readonly transport: Transport;

  constructor(baseUrl: string, token: string, options: ClientOptions = {}) {
    this.baseUrl = checkBaseUrl(baseUrl);
    checkKey(token, "hpr_", "a reviewer token", "token");
    this.transport = new Transport(this.baseUrl, token, options);
  }

  async queuePage(team: string, options: { kind?: QueueKind; limit?: number; cursor?: string } & RequestOptions = {}): Promise<StepPage> {
    const answer = await this.transport.send({
      method: "GET",
      path: teamPath(team) + "/queue",
      params: { kind: options.kind ?? "approvals", limit: options.limit, cursor: options.cursor },
      idempotent: true,
      expect: [200],
      signal: options.signal,
    });
    return checkPage(answer.json, answer.status);
  }

  async *queue(team: string, options: { kind?: QueueKind; pageSize?: number } & RequestOptions = {}): AsyncGenerator<Step> {
    let params: Record<string, string | number | undefined> | null = { kind: options.kind ?? "approvals", limit: options.pageSize };
    while (params !== null) {
      const answer = await this.transport.send({ method: "GET", path: teamPath(team) + "/queue", params, idempotent: true, expect: [200], signal: options.signal });
      const page = checkPage(answer.json, answer.status);
      yield* page.results;
      params = nextParams(page.next);
    }
  }

  /** A step of the team (the §4 shape) and its ETag. */
  async step(team: string, operationRef: string, options: RequestOptions = {}): Promise<ReviewedStep> {
    checkOperationRef(operationRef);
    const answer = await this.transport.send({ method: "GET", path: teamStepPath(team, operationRef), idempotent: true, expect: [200], signal: options.signal });
    const step = checkStep(answer.json, "answer", answer.status);
    const etag = answer.headers.get("ETag");
    if (!etag) throw new InvalidResponse("the reviewer API's step came without an ETag", { code: "invalid_response", status: answer.status, missing: "ETag" });
    return { step, etag };
  }

  /** Decide on the step version `etag` names; `input`: an edited input, for `approve`.
   * Throws StepChanged (412), Unauthorized/RoleRequired (401/403), NotFound,
   * DecisionNotAllowed (409), ValidationFailed (422, e.g. a missing reason). */
  async decide(
    team: string,
    operationRef: string,
    options: { action: DecisionAction; etag: string; reason?: string; input?: Record<string, unknown> } & RequestOptions,
  ): Promise<DecisionAnswer> {
    checkOperationRef(operationRef);
    if (typeof options.etag !== "string" || !options.etag) throw new InvalidArgument("etag is the step's ETag, as read", "etag");
    const body: Record<string, unknown> = { action: options.action };
    if (options.reason !== undefined) body["reason"] = options.reason;
    if (options.input !== undefined) body["input"] = toJsonValue(options.input, "input");
    const answer = await this.transport.send({
      method: "POST",
      path: teamStepPath(team, operationRef) + "/decisions",
      body,
      headers: { "If-Match": options.etag },
      idempotent: false, // a decision sent twice would be refused 412 at best: never resend
      expect: [201],
      signal: options.signal,
    });
    return checkDecisionAnswer(answer.json, answer.status);
  }
}
