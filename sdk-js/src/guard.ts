/**
 * The guard: one tool call, wrapped so that Holdpoint decides what happens next.
 *
 *   const outcome = await hp.guard("create_invoice", invoice, (input) => provider.createInvoice(input));
 *   if (outcome.action === "verify") ...
 *
 * A guard
 * 1. checks the tool name and the input (a JSON object with a canonical form) before anything
 *    is sent (`InvalidArgument`), and fixes the operation_ref (pass the one you stored, or keep
 *    `outcome.operationRef`: a retry of the operation must use it again);
 * 2. fingerprints the input (SHA-256 of its RFC 8785 form) and asks the attempt gate, sending
 *    the input too (the reviewer sees what they approve) unless `sendInput: false`; a refusal
 *    is an outcome, not an exception, and the call is not made;
 * 3. runs the call with the input to run (after a reviewer approved an edited input, theirs);
 *    what it threw, an HTTP error it returned, or its timeout or abort becomes an error
 *    envelope (a timeout or abort after it started, on a write, is `unknown`), anything else a
 *    success envelope;
 * 4. posts the envelope with an Idempotency-Key and returns an `Outcome` with Holdpoint's
 *    directive; with `waitForHoldMs`, a hold (the gate's or the envelope's) is waited for
 *    that long, and an approval runs exactly the approved input.
 */

import { checkMode, SUCCESS_DIRECTIVE, type ReportSuccess } from "./background.js";
import { randomUUID } from "node:crypto";

import type { Holdpoint } from "./client.js";
import {
  DEFAULT_RETRY_DELAY_MS,
  MAX_INPUT_BYTES,
  Failure,
  canonicalJson,
  checkInput,
  checkOperationRef,
  checkToolName,
  failureForError,
  failureForResponse,
  httpAnswerOf,
  parseTime,
  sha256,
  successEnvelope,
} from "./envelopes.js";
import {
  AttemptRefused,
  DecisionTimeout,
  HoldpointError,
  HoldpointUnavailable,
  ReportNotDelivered,
  ServerError,
  Throttled,
  ValidationFailed,
} from "./errors.js";
import type { Action, AttemptGrant, Directive, IngestAnswer, JsonObject, Step } from "./types.js";

/** What the guarded call is given besides its input. */
export interface RunContext {
  operationRef: string;
  attempt: number;
  /** Aborts when the guard's `timeoutMs` passes or its `signal` aborts: stop the call. */
  signal: AbortSignal;
}

export type ToolRun<R> = (input: JsonObject, context: RunContext) => R | Promise<R>;

export interface GuardOptions {
  /** The step's operation_ref (default: a new one). A retry of an operation reuses it. */
  operationRef?: string;
  runId?: string;
  correlationId?: string;
  /** The tool writes (default true). False: a failure cannot have written anything. */
  sideEffects?: boolean;
  /** Named in `safe_details.verification_tool` when the outcome must be verified. */
  verificationTool?: string;
  /** Your own mapping of a thrown error (return null to fall back to the SDK's). */
  classify?: (error: unknown) => Failure | null | undefined;
  /** Send the input itself to the gate (default true); false sends its fingerprint only. */
  sendInput?: boolean;
  /** The call's own bound in milliseconds: past it the call is aborted and, on a write,
   * reported `unknown` (it may have written). */
  timeoutMs?: number;
  /** Aborts the guarded call: before the gate nothing is sent; while the call runs it is
   * reported as a timeout (on a write: `unknown`); while waiting for a hold, the wait ends. */
  signal?: AbortSignal;
  /** Wait this long (ms) for a reviewer's decision when the step is held (default 0: return
   * the hold); an approval then runs exactly the approved (possibly edited) input. */
  waitForHoldMs?: number;
  /** Polling of that wait (defaults 1 000 and 15 000 ms). */
  pollIntervalMs?: number;
  maxPollIntervalMs?: number;
  /** An evidence reference for a success (`verification.evidence_ref`), from the result. */
  evidenceRef?: (result: unknown) => string | null | undefined;
  /** "after": return a success at once and post its envelope in the background (its
   * directive is always `stop`; a failure is still reported first). Default: the client's. */
  reportSuccess?: ReportSuccess;
}

/** What came of one guarded call, and what Holdpoint says to do next. */
export class Outcome<R = unknown> {
  readonly operationRef: string;
  /** null only for a refusal that created no step. */
  readonly step: Step | null;
  readonly directive: Directive;
  /** The granted attempt's number (null when refused). */
  readonly attempt: number | null;
  /** What the call returned (undefined when it was not made or threw). */
  readonly result: R | undefined;
  /** What the call threw (or its timeout's reason). */
  readonly error: unknown;
  /** The failure reported for it. */
  readonly failure: Failure | null;
  /** The gate's refusal: the call was not made. */
  readonly refusal: AttemptRefused | null;
  readonly envelope: Record<string, unknown> | null;
  readonly answer: IngestAnswer | null;
  /** The input the gate was asked about (and the call ran, when granted). */
  readonly input: JsonObject;
  /** A reviewer approved an edited input: `input` is theirs. */
  readonly inputEdited: boolean;
  /** The gate received `input` itself, not only its fingerprint. */
  readonly inputSent: boolean;
  /** The guard waited for a hold and it ran out of time (the step is still held). */
  readonly holdTimedOut: boolean;
  /** reportSuccess "after": the envelope is queued, posted after this returned; `answer` is
   * null and `directive` a success's (`stop`). */
  readonly reportPending: boolean;

  constructor(fields: {
    operationRef: string;
    step: Step | null;
    directive: Directive;
    attempt?: number | null;
    result?: R | undefined;
    error?: unknown;
    failure?: Failure | null;
    refusal?: AttemptRefused | null;
    envelope?: Record<string, unknown> | null;
    answer?: IngestAnswer | null;
    input: JsonObject;
    inputEdited: boolean;
    inputSent: boolean;
    holdTimedOut?: boolean;
    reportPending?: boolean;
  }) {
    this.operationRef = fields.operationRef;
    this.step = fields.step;
    this.directive = fields.directive;
    this.attempt = fields.attempt ?? null;
    this.result = fields.result;
    this.error = fields.error;
    this.failure = fields.failure ?? null;
    this.refusal = fields.refusal ?? null;
    this.envelope = fields.envelope ?? null;
    this.answer = fields.answer ?? null;
    this.input = fields.input;
    this.inputEdited = fields.inputEdited;
    this.inputSent = fields.inputSent;
    this.holdTimedOut = fields.holdTimedOut ?? false;
    this.reportPending = fields.reportPending ?? false;
  }

  /** The call ran and reported success (its write committed). */
  get ok(): boolean {
    return this.refusal === null && this.failure === null && this.attempt !== null;
  }
  get refused(): boolean {
    return this.refusal !== null;
  }
  get action(): Action {
    return this.directive.action;
  }
  get mayWrite(): boolean {
    return this.directive.may_write;
  }
  get notBefore(): Date | null {
    return parseTime(this.directive.not_before);
  }
  /** The step's page on the dashboard, for a reviewer. */
  get stepUrl(): string | null {
    return this.step ? this.step.url : null;
  }

  /** The same outcome with the step as last read (after waiting for a hold). */
  withStep(step: Step, holdTimedOut: boolean): Outcome<R> {
    return new Outcome<R>({ ...this.fields(), step, directive: step.directive, holdTimedOut });
  }

  private fields(): ConstructorParameters<typeof Outcome<R>>[0] {
    return {
      operationRef: this.operationRef,
      step: this.step,
      directive: this.directive,
      attempt: this.attempt,
      result: this.result,
      error: this.error,
      failure: this.failure,
      refusal: this.refusal,
      envelope: this.envelope,
      answer: this.answer,
      input: this.input,
      inputEdited: this.inputEdited,
      inputSent: this.inputSent,
      holdTimedOut: this.holdTimedOut,
      reportPending: this.reportPending,
    };
  }
}

/** A fresh operation_ref. Store it before the first write: a retry must reuse it. */
export function newOperationRef(prefix = "op"): string {
  return `${prefix}_${randomUUID().replaceAll("-", "")}`;
}

const UNDELIVERED = [HoldpointUnavailable, ServerError, Throttled];
/** A guard waits for at most this many holds in one call: each approval releases one run. */
const MAX_HOLDS = 5;

/** A 422 about `input` itself (too large, too deep, not an object), as opposed to
 * `input_fingerprint` (a mismatch is never papered over). */
function namesInput(error: ValidationFailed): boolean {
  return error.errors.some((e) => typeof e.field === "string" && (e.field === "input" || /^input[./[]/.test(e.field)));
}

function inputRules(error: ValidationFailed): string {
  const rules = [...new Set(error.errors.map((e) => String(e.rule ?? e["code"] ?? "?")))].sort();
  return rules.join(", ") || error.code;
}

class Timeout extends Error {
  constructor(ms: number) {
    super(`the tool call took longer than ${ms} ms`);
    this.name = "TimeoutError";
  }
}

interface Asked {
  operationRef: string;
  tool: string;
  input: JsonObject;
  inputEdited: boolean;
  inputSent: boolean;
  grant: AttemptGrant;
  envelopeKey: string;
}

/** The gate: a grant to run, or the refusal as an Outcome. */
async function askGate(
  client: Holdpoint,
  tool: string,
  operationRef: string,
  original: { input: JsonObject; canonical: string },
  options: GuardOptions,
): Promise<Asked | Outcome<never>> {
  // After an approval with an edited input, the gate grants only the reviewer's input: that
  // is the one fingerprinted, sent and run.
  const approved = client.approvedInput(operationRef);
  const approvedCanonical = approved ? canonicalJson(approved) : null;
  const edited = approved !== null && approvedCanonical !== original.canonical;
  const input = edited && approved ? approved : original.input;
  const canonical = edited && approvedCanonical !== null ? approvedCanonical : original.canonical;
  const fingerprint = sha256(canonical);
  const size = Buffer.byteLength(canonical, "utf8");
  let sent: JsonObject | null = options.sendInput === false ? null : input;
  if (sent !== null && size > MAX_INPUT_BYTES) {
    console.warn(`holdpoint: not sending the input of ${tool} on ${operationRef} (its canonical form is ${size} bytes, over the ${MAX_INPUT_BYTES} the gate takes); the reviewer sees only its fingerprint`);
    sent = null;
  }
  // One key per request kind: a lost answer is asked for again and Holdpoint replays it.
  let attemptKey = `att_${randomUUID()}`;
  const ask = (withInput: JsonObject | null): Promise<AttemptGrant> =>
    client.requestAttempt(operationRef, {
      tool,
      inputFingerprint: fingerprint,
      input: withInput,
      runId: options.runId ?? null,
      correlationId: options.correlationId ?? null,
      idempotencyKey: attemptKey,
      ...(options.signal ? { signal: options.signal } : {}),
    });
  await client.reportsSettled(operationRef); // its queued success report lands first
  let grant: AttemptGrant;
  try {
    try {
      grant = await ask(sent);
    } catch (error) {
      if (!(error instanceof ValidationFailed) || sent === null || !namesInput(error)) throw error;
      // The gate refused the input itself: ask again with the fingerprint alone, under a new
      // key (the refusal is stored under the old one), so the write is still gated.
      console.warn(`holdpoint: the attempt gate refused the input of ${tool} on ${operationRef} (${inputRules(error)}); asking again with its fingerprint only`);
      sent = null;
      attemptKey = `att_${randomUUID()}`;
      grant = await ask(null);
    }
  } catch (error) {
    if (error instanceof AttemptRefused) {
      return new Outcome<never>({ operationRef, input, inputEdited: edited, step: error.step, directive: error.directive, refusal: error, inputSent: sent !== null });
    }
    throw error;
  }
  return { operationRef, tool, input, inputEdited: edited, inputSent: sent !== null, grant, envelopeKey: `env_${randomUUID()}` };
}

/** The granted call, bounded by timeoutMs and the caller's signal, then its report. */
async function runAndReport<R>(client: Holdpoint, asked: Asked, run: ToolRun<R>, options: GuardOptions): Promise<Outcome<R>> {
  const { operationRef, input, grant } = asked;
  const controller = new AbortController();
  const stop = (reason: unknown): void => controller.abort(reason);
  const onAbort = (): void => stop(options.signal?.reason ?? new DOMException("aborted", "AbortError"));
  options.signal?.addEventListener("abort", onAbort, { once: true });
  const timer = options.timeoutMs !== undefined ? setTimeout(() => stop(new Timeout(options.timeoutMs ?? 0)), options.timeoutMs) : null;
  const aborted = new Promise<never>((_, reject) => {
    controller.signal.addEventListener("abort", () => reject(controller.signal.reason), { once: true });
  });
  aborted.catch(() => undefined);
  let result: R | undefined;
  let thrown: unknown;
  let threw = false;
  try {
    if (options.signal?.aborted) throw options.signal.reason;
    const running = Promise.resolve().then(() => run(structuredClone(input), { operationRef, attempt: grant.attempt, signal: controller.signal }));
    running.catch(() => undefined); // settled after a timeout: nobody is listening any more
    result = await Promise.race([running, aborted]);
  } catch (error) {
    threw = true;
    thrown = error;
  } finally {
    if (timer) clearTimeout(timer);
    options.signal?.removeEventListener("abort", onAbort);
  }

  return report(client, asked, options, threw ? { thrown } : { result });
}

/** The envelope of a call's result (or of what it threw, or of an explicit Failure), posted
 * with the attempt's Idempotency-Key. */
async function report<R>(
  client: Holdpoint,
  asked: Asked,
  options: GuardOptions,
  what: { result?: R | undefined; thrown?: unknown; failure?: Failure },
): Promise<Outcome<R>> {
  const { operationRef, tool, input, grant, envelopeKey } = asked;
  const threw = "thrown" in what;
  const { result, thrown } = what;
  let failure: Failure | null = what.failure ?? null;
  const mapping = { sideEffects: options.sideEffects ?? true, defaultDelayMs: client.defaultRetryDelayMs ?? DEFAULT_RETRY_DELAY_MS };
  if (failure === null && threw) {
    failure = options.classify?.(thrown) ?? failureForError(thrown, mapping);
  } else if (failure === null) {
    const http = await httpAnswerOf(result);
    if (http) failure = failureForResponse(http, mapping);
  }
  if (failure && failure.nextAction === "verify_operation" && options.verificationTool && !("verification_tool" in failure.safeDetails)) {
    failure = failure.with({ safeDetails: { ...failure.safeDetails, verification_tool: options.verificationTool } });
  }
  const now = new Date();
  const common = { tool, operationRef, occurredAt: now, attempt: grant.attempt, runId: options.runId ?? null, correlationId: options.correlationId ?? null };
  const envelope = failure
    ? failure.envelope({ ...common, attemptsRemaining: grant.step.max_attempts - grant.step.attempts })
    : successEnvelope({ ...common, result, evidenceRef: options.evidenceRef?.(result) ?? null });
  const fields = { operationRef, input, inputEdited: asked.inputEdited, inputSent: asked.inputSent, attempt: grant.attempt, error: thrown, failure, envelope };
  if (!failure && checkMode(options.reportSuccess ?? client.reportSuccess) === "after") {
    await client.reportLater(envelope, envelopeKey, operationRef);
    return new Outcome<R>({ ...fields, step: grant.step, directive: { ...SUCCESS_DIRECTIVE }, result: what.failure ? undefined : result, reportPending: true });
  }
  let answer: IngestAnswer;
  try {
    // Not under the caller's signal: a call that ran is always reported.
    answer = await client.postEnvelope(envelope, { idempotencyKey: envelopeKey });
  } catch (error) {
    if (UNDELIVERED.some((cls) => error instanceof cls)) {
      throw new ReportNotDelivered(error as HoldpointError, { envelope, idempotencyKey: envelopeKey, result, error: thrown });
    }
    throw error;
  }
  return new Outcome<R>({
    operationRef,
    input,
    inputEdited: asked.inputEdited,
    inputSent: asked.inputSent,
    step: answer.step,
    directive: answer.directive,
    attempt: grant.attempt,
    result: threw || what.failure ? undefined : result,
    error: thrown,
    failure,
    envelope,
    answer,
  });
}

function isOutcome(value: Asked | Outcome<never>): value is Outcome<never> {
  return value instanceof Outcome;
}

/**
 * A guarded call in two halves, for frameworks that ask "may this run?" before they run it
 * (the OpenAI Agents SDK's `needsApproval`): `GuardedCall.begin` asks the gate; `run` makes the
 * call (when granted), reports it and waits for a hold as `guard` does.
 */
export class GuardedCall {
  /** The gate's refusal, when it refused (the call will not be made). */
  readonly refusal: Outcome<never> | null;
  private asked: Asked | null;

  private constructor(
    private readonly client: Holdpoint,
    private readonly tool: string,
    private readonly original: { input: JsonObject; canonical: string },
    readonly operationRef: string,
    private options: GuardOptions,
    first: Asked | Outcome<never>,
  ) {
    this.refusal = isOutcome(first) ? first : null;
    this.asked = isOutcome(first) ? null : first;
  }

  /** Check the input and ask the attempt gate (nothing is sent for a bad input). */
  static async begin(client: Holdpoint, tool: string, input: Record<string, unknown>, options: GuardOptions = {}): Promise<GuardedCall> {
    checkToolName(tool);
    const original = checkInput(input);
    const operationRef = checkOperationRef(options.operationRef ?? newOperationRef());
    const first = await askGate(client, tool, operationRef, original, options);
    return new GuardedCall(client, tool, original, operationRef, options, first);
  }

  /** The directive of the gate's answer (proceed when granted). */
  get directive(): Directive {
    return this.refusal ? this.refusal.directive : (this.asked as Asked).grant.directive;
  }

  private take(): Asked {
    if (this.refusal) throw new Error("the attempt gate refused this call: there is nothing to report");
    if (!this.asked) throw new Error("a GuardedCall reports one call; begin a new one for the next attempt");
    const asked = this.asked;
    this.asked = null; // a grant is used once
    return asked;
  }

  /** Report that a call made outside `run` committed (the Python SDK's `report_success`). */
  async reportSuccess<R>(result?: R, options: { evidenceRef?: string } = {}): Promise<Outcome<R>> {
    const evidence = options.evidenceRef;
    const reportOptions = evidence !== undefined ? { ...this.options, evidenceRef: () => evidence } : this.options;
    return report(this.client, this.take(), reportOptions, { result });
  }

  /** Report that a call made outside `run` failed: what it threw (mapped as `run`'s would be),
   * or an explicit `Failure`. */
  async reportFailure(error: unknown): Promise<Outcome<never>> {
    const asked = this.take();
    return report(this.client, asked, this.options, error instanceof Failure ? { failure: error } : { thrown: error });
  }

  /** Run the call if granted, report it, and wait for a hold within `waitForHoldMs`. */
  async run<R>(run: ToolRun<R>, overrides: Pick<GuardOptions, "signal"> = {}): Promise<Outcome<R>> {
    if (typeof run !== "function") throw new TypeError("guard(tool, input, run): run is the function that makes the call");
    if (overrides.signal) this.options = { ...this.options, signal: overrides.signal };
    const waitFor = Math.max(0, this.options.waitForHoldMs ?? 0);
    const deadline = Date.now() + waitFor;
    let outcome: Outcome<R>;
    if (this.asked) {
      const asked = this.asked;
      this.asked = null; // a grant is used once
      outcome = await runAndReport(this.client, asked, run, this.options);
    } else if (this.refusal) {
      outcome = this.refusal;
    } else {
      throw new Error("a GuardedCall runs once; begin a new one for the next attempt");
    }
    for (let holds = 0; holds < MAX_HOLDS && outcome.action === "hold" && waitFor > 0; holds++) {
      const left = deadline - Date.now();
      if (left <= 0) return outcome.step ? outcome.withStep(outcome.step, true) : outcome;
      let step: Step;
      try {
        step = await this.client.waitForDecision(this.operationRef, {
          timeoutMs: left,
          initialIntervalMs: this.options.pollIntervalMs ?? 1000,
          maxIntervalMs: this.options.maxPollIntervalMs ?? 15_000,
          waitingActions: new Set<Action>(["hold"]),
          ...(this.options.signal ? { signal: this.options.signal } : {}),
        });
      } catch (error) {
        if (error instanceof DecisionTimeout) return error.step ? outcome.withStep(error.step, true) : outcome;
        throw error;
      }
      if (step.directive.action !== "proceed") return outcome.withStep(step, false);
      // Approved (or permitted): ask the gate again; it grants exactly the approved input.
      const next = await askGate(this.client, this.tool, this.operationRef, this.original, this.options);
      outcome = isOutcome(next) ? next : await runAndReport(this.client, next, run, this.options);
    }
    return outcome;
  }
}

/** `Holdpoint.guard`: see the module's comment. */
export async function runGuard<R>(
  client: Holdpoint,
  tool: string,
  input: Record<string, unknown>,
  run: ToolRun<R>,
  options: GuardOptions = {},
): Promise<Outcome<R>> {
  if (typeof run !== "function") throw new TypeError("guard(tool, input, run): run is the function that makes the call");
  const call = await GuardedCall.begin(client, tool, input, options);
  return call.run(run);
}
