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
  InvalidArgument,
  InvalidResponse,
  isRecord,
} from "./errors.js";
import { checkOperationRef, checkToolName, parseTime, rfc3339, toJsonValue } from "./envelopes.js";
import {
  checkCodes,
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
  IngestAnswer,
  JsonObject,
  Metrics,
  Skipped,
  Step,
  StepAnswer,
  StepPage,
  VerificationOutcome,
} from "./types.js";
import { runGuard, type GuardOptions, type Outcome, type ToolRun } from "./guard.js";
import {
  CONTENT_TYPES,
  Transport,
  checkBaseUrl,
  checkKey,
  jitter,
  nextParams,
  sleep,
  stepPath,
  type Answer,
  type ClientOptions,
  type Dialect,
  type RequestOptions,
} from "./transport.js";

export { Reviewer, type ReviewedStep } from "./reviewer.js";
export { VERSION, stepPath, teamPath, teamStepPath, type ClientOptions, type Dialect, type RequestOptions } from "./transport.js";

/** A hold, a verification or a wait ends by someone else's act (or a timer): keep polling. */
export const WAITING_ACTIONS: ReadonlySet<Action> = new Set<Action>(["hold", "verify", "wait"]);
const MAX_REMEMBERED_APPROVALS = 1024;

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
