/**
 * Envelopes from tool results: the input fingerprint, and what a thrown error means.
 *
 * Pure (no I/O), so the mapping from "what the tool call threw" to "what Holdpoint is told"
 * reads as a table, the same as the Python SDK's:
 *
 * | the call threw / returned                         | commit_state  | next_action          |
 * |---------------------------------------------------|---------------|----------------------|
 * | `ToolError(failure)`                              | the failure's | the failure's        |
 * | a connect failure (ECONNREFUSED, ENOTFOUND, ...)  | not_committed | wait_and_retry       |
 * | a timeout or abort after sending, a reset socket  | unknown       | verify_operation (*) |
 * | HTTP 429 / 408 (Retry-After -> absolute not_before)| not_committed | wait_and_retry       |
 * | HTTP 401, 403                                     | not_committed | escalate             |
 * | HTTP 409                                          | not_committed | escalate (conflict)  |
 * | other 4xx whose JSON body names a field           | not_committed | correct_input        |
 * | other 4xx                                         | not_committed | escalate             |
 * | HTTP 5xx                                          | unknown       | verify_operation (*) |
 * | anything else                                     | unknown       | verify_operation (*) |
 *
 * An HTTP answer is a returned `Response` that is not ok, or a thrown error carrying a numeric
 * `status` (and `headers`), as the OpenAI and most HTTP clients throw. (*) For a tool without
 * side effects nothing can have been written: `not_committed` / `wait_and_retry` (an
 * unexpected error: `escalate`).
 */

import { createHash } from "node:crypto";
import canonicalize from "canonicalize";

import { InvalidArgument, isRecord } from "./errors.js";
import type { JsonObject, JsonValue } from "./types.js";

export type Category = "validation" | "authorization" | "conflict" | "dependency" | "rate_limit" | "internal";
export type CommitState = "not_committed" | "committed" | "unknown";
export type NextAction =
  | "correct_input"
  | "wait_and_retry"
  | "verify_operation"
  | "request_approval"
  | "escalate"
  | "abort";
export type Scope = "request" | "resource" | "service";
export type SafeValue = string | number | boolean;

/** Milliseconds, when a failure asks for a delay without saying how long. */
export const DEFAULT_RETRY_DELAY_MS = 30_000;
/** The attempt gate's limit on `input`'s canonical form (contract §4). */
export const MAX_INPUT_BYTES = 32 * 1024;
const TOOL_NAME = /^[a-z0-9][a-z0-9_.-]{0,99}$/;
const CODE = /^[A-Z][A-Z0-9_]{1,63}$/;

export function rfc3339(value: Date): string {
  if (Number.isNaN(value.getTime())) throw new InvalidArgument("an invalid Date cannot be sent", "time");
  return value.toISOString();
}

export function parseTime(value: string | null | undefined): Date | null {
  if (!value) return null;
  const parsed = new Date(value);
  return Number.isNaN(parsed.getTime()) ? null : parsed;
}

// --- the input fingerprint -------------------------------------------------------------------

function describe(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "object") return value.constructor?.name ?? "object without prototype";
  return typeof value;
}

/**
 * The value as plain JSON, or an `InvalidArgument` naming the path of what has no JSON form:
 * a BigInt, NaN or an infinity, a function, a symbol, a cycle, a Map, a Set or a class instance
 * without `toJSON`. Dates become their ISO 8601 string (as `JSON.stringify` sends them), and
 * an object key whose value is `undefined` is left out (as `JSON.stringify` does), so what is
 * fingerprinted is exactly what is sent.
 */
export function toJsonValue(value: unknown, path = "input", seen: Set<object> = new Set()): JsonValue {
  switch (typeof value) {
    case "string":
      return value;
    case "boolean":
      return value;
    case "number":
      if (!Number.isFinite(value)) throw new InvalidArgument(`${path} is ${value}: JSON has no form for it`, path);
      return value;
    case "bigint":
      throw new InvalidArgument(`${path} is a BigInt: JSON has no form for it; send a string or a number`, path);
    case "undefined":
    case "function":
    case "symbol":
      throw new InvalidArgument(`${path} is ${typeof value === "undefined" ? "undefined" : `a ${typeof value}`}: JSON has no form for it`, path);
  }
  if (value === null) return null;
  const obj = value as object;
  if (seen.has(obj)) throw new InvalidArgument(`${path} refers back to an enclosing value (a cycle)`, path);
  if (obj instanceof Date) return rfc3339(obj);
  seen.add(obj);
  try {
    if (Array.isArray(obj)) return obj.map((item, i) => toJsonValue(item === undefined ? null : item, `${path}[${i}]`, seen));
    const proto = Object.getPrototypeOf(obj) as unknown;
    if (proto !== Object.prototype && proto !== null) {
      const toJSON = (obj as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === "function") return toJsonValue(toJSON.call(obj), path, seen);
      throw new InvalidArgument(`${path} is a ${describe(obj)}: pass plain objects, arrays and JSON scalars`, path);
    }
    const out: JsonObject = {};
    for (const [key, item] of Object.entries(obj)) {
      if (item === undefined) continue;
      out[key] = toJsonValue(item, `${path}.${key}`, seen);
    }
    return out;
  } finally {
    seen.delete(obj);
  }
}

/** The RFC 8785 (JCS) canonical form the fingerprint hashes (computed by the `canonicalize`
 * package, by the RFC's author): keys sorted by UTF-16 code units, no whitespace, numbers as
 * ECMAScript prints them. Throws `InvalidArgument` for a value without a JSON form. */
export function canonicalJson(value: unknown): string {
  const plain = toJsonValue(value);
  let text: string | undefined;
  try {
    text = canonicalize(plain);
  } catch (error) {
    // A lone surrogate in a string: no UTF-8 form, so no fingerprint.
    throw new InvalidArgument(`input has no canonical form: ${(error as Error).message}`, "input");
  }
  if (text === undefined) throw new InvalidArgument("input has no canonical form", "input");
  return text;
}

/** Lowercase hex SHA-256 of the RFC 8785 canonical JSON of a tool call's input (the attempt
 * gate's `input_fingerprint`); the server recomputes it from `input`. */
export function inputFingerprint(value: unknown): string {
  return sha256(canonicalJson(value));
}

export function sha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** A tool call's input as the guard takes it: a JSON object, with its canonical form. */
export function checkInput(input: unknown): { input: JsonObject; canonical: string } {
  if (!isRecord(input)) {
    throw new InvalidArgument(`a tool call's input is a JSON object; got ${Array.isArray(input) ? "an array" : describe(input)}`, "input");
  }
  const canonical = canonicalJson(input);
  return { input: toJsonValue(input) as JsonObject, canonical };
}

export function checkToolName(tool: unknown): string {
  if (typeof tool !== "string" || !TOOL_NAME.test(tool)) {
    throw new InvalidArgument(`tool must match ${TOOL_NAME.source}; got ${JSON.stringify(String(tool))}`, "tool");
  }
  return tool;
}

export function checkOperationRef(ref: unknown): string {
  // eslint-disable-next-line no-control-regex
  if (typeof ref !== "string" || ref.length < 1 || ref.length > 200 || /[\u0000-\u001f\u007f]/.test(ref)) {
    throw new InvalidArgument("operation_ref is 1..200 printable characters", "operationRef");
  }
  return ref;
}

// --- failures -------------------------------------------------------------------------------

export interface FailureFields {
  code: string;
  category: Category;
  commitState: CommitState;
  nextAction: NextAction;
  notBefore?: Date | null;
  scope?: Scope;
  resourceId?: string | null;
  safeDetails?: Record<string, SafeValue>;
  agentMessage?: string | null;
  userMessage?: string | null;
}

type More = Partial<Pick<FailureFields, "scope" | "resourceId" | "safeDetails" | "agentMessage" | "userMessage">>;

const RETRY_DIRECTIVE: Partial<Record<NextAction, string>> = {
  wait_and_retry: "after_delay",
  correct_input: "after_input_fix",
};

/** The error half of an envelope. The retry directive follows from `nextAction`, so a
 * Failure built by the constructors below always satisfies the contract's consistency rules. */
export class Failure {
  readonly code: string;
  readonly category: Category;
  readonly commitState: CommitState;
  readonly nextAction: NextAction;
  readonly notBefore: Date | null;
  readonly scope: Scope;
  readonly resourceId: string | null;
  readonly safeDetails: Readonly<Record<string, SafeValue>>;
  readonly agentMessage: string | null;
  readonly userMessage: string | null;

  constructor(fields: FailureFields) {
    if (!CODE.test(fields.code)) throw new InvalidArgument(`a failure code matches ${CODE.source}`, "code");
    this.code = fields.code;
    this.category = fields.category;
    this.commitState = fields.commitState;
    this.nextAction = fields.nextAction;
    this.notBefore = fields.notBefore ?? null;
    this.scope = fields.scope ?? "request";
    this.resourceId = fields.resourceId ?? null;
    this.safeDetails = { ...(fields.safeDetails ?? {}) };
    this.agentMessage = fields.agentMessage ?? null;
    this.userMessage = fields.userMessage ?? null;
  }

  get retryDirective(): string {
    return RETRY_DIRECTIVE[this.nextAction] ?? "never";
  }

  with(fields: Partial<FailureFields>): Failure {
    return new Failure({ ...this.fields(), ...fields });
  }

  private fields(): FailureFields {
    return {
      code: this.code,
      category: this.category,
      commitState: this.commitState,
      nextAction: this.nextAction,
      notBefore: this.notBefore,
      scope: this.scope,
      resourceId: this.resourceId,
      safeDetails: { ...this.safeDetails },
      agentMessage: this.agentMessage,
      userMessage: this.userMessage,
    };
  }

  /** The canonical error envelope (contract §2) for this failure. */
  envelope(options: {
    tool: string;
    operationRef: string;
    attemptsRemaining: number;
    occurredAt: Date;
    attempt?: number | null;
    runId?: string | null;
    correlationId?: string | null;
  }): Record<string, unknown> {
    const retry: Record<string, unknown> = { directive: this.retryDirective };
    retry["max_attempts_remaining"] = this.retryDirective === "never" ? 0 : Math.max(0, options.attemptsRemaining);
    if (this.retryDirective === "after_delay") {
      const notBefore = this.notBefore ?? new Date(options.occurredAt.getTime() + DEFAULT_RETRY_DELAY_MS);
      retry["not_before"] = rfc3339(notBefore);
    }
    const body: Record<string, unknown> = {
      ok: false,
      tool: options.tool,
      operation_ref: options.operationRef,
      code: this.code,
      category: this.category,
      commit_state: this.commitState,
      retry,
      next_action: this.nextAction,
      scope: this.scope,
      safe_details: { ...this.safeDetails },
      occurred_at: rfc3339(options.occurredAt),
    };
    if (this.resourceId !== null) body["resource_id"] = this.resourceId;
    const optional: [string, unknown][] = [
      ["agent_message", this.agentMessage],
      ["user_message", this.userMessage],
      ["attempt", options.attempt],
      ["run_id", options.runId],
      ["correlation_id", options.correlationId],
    ];
    for (const [key, value] of optional) if (value !== null && value !== undefined) body[key] = value;
    return body;
  }

  // Constructors for the common cases (the seed scenarios).

  static invalidInput(code: string, options: { field: string } & More): Failure {
    const { field, safeDetails, ...more } = options;
    return new Failure({ code, category: "validation", commitState: "not_committed", nextAction: "correct_input", safeDetails: { field, ...safeDetails }, ...more });
  }

  static retryLater(code: string, options: { notBefore: Date; category?: Category } & More): Failure {
    const { notBefore, category = "rate_limit", ...more } = options;
    return new Failure({ code, category, commitState: "not_committed", nextAction: "wait_and_retry", notBefore, ...more });
  }

  static outcomeUnknown(code = "OUTCOME_UNKNOWN", options: { category?: Category } & More = {}): Failure {
    const { category = "dependency", ...more } = options;
    return new Failure({ code, category, commitState: "unknown", nextAction: "verify_operation", ...more });
  }

  static approvalRequired(code: string, options: { category?: Category } & More = {}): Failure {
    const { category = "authorization", ...more } = options;
    return new Failure({ code, category, commitState: "not_committed", nextAction: "request_approval", ...more });
  }

  /** The whole downstream service is down: Holdpoint halts the tool until notBefore. */
  static serviceOutage(code: string, options: { notBefore: Date } & More): Failure {
    const { notBefore, ...more } = options;
    return new Failure({ code, category: "dependency", commitState: "not_committed", nextAction: "wait_and_retry", notBefore, scope: "service", ...more });
  }

  static escalate(code: string, options: { category: Category; commitState?: CommitState } & More): Failure {
    const { category, commitState = "not_committed", ...more } = options;
    return new Failure({ code, category, commitState, nextAction: "escalate", ...more });
  }
}

/** Throw from inside a guarded call to say exactly what failed:
 * `throw new ToolError(Failure.invalidInput("BAD_EMAIL", { field: "to" }))`. */
export class ToolError extends Error {
  readonly failure: Failure;
  constructor(failure: Failure) {
    super(failure.code);
    this.name = "ToolError";
    this.failure = failure;
  }
}

// --- mapping what a call threw ----------------------------------------------------------------

/** Seconds to wait from a Retry-After header (delta-seconds or an HTTP date). */
export function parseRetryAfter(value: string | null | undefined, now: Date = new Date()): number | null {
  if (value === null || value === undefined) return null;
  const text = value.trim();
  if (!text) return null;
  if (/^\d+$/.test(text)) return Number(text);
  const when = Date.parse(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - now.getTime()) / 1000);
}

const FIELD_KEYS = ["field", "param", "parameter", "property"];
const NESTED_KEYS = ["error", "errors", "detail", "details", "invalid_params", "invalid-params", "violations"];

/** The input field an error body blames, in the shapes common APIs use (as the Python SDK's
 * `field_named_in`): `{field}`, Stripe's `{error: {param}}`, RFC 9457 `invalid_params[].name`,
 * FastAPI's `detail[].loc`, JSON:API `errors[].source.pointer`, Rails' `{errors: {email: []}}`. */
export function fieldNamedIn(body: unknown, depth = 0): string | null {
  if (depth > 4) return null;
  if (Array.isArray(body)) {
    for (const item of body.slice(0, 10)) {
      const found = fieldNamedIn(item, depth + 1);
      if (found) return found;
    }
    return null;
  }
  if (!isRecord(body)) return null;
  for (const key of FIELD_KEYS) {
    const value = body[key];
    if (typeof value === "string" && value.trim()) return value.trim().slice(0, 200);
  }
  const name = body["name"];
  if (depth > 0 && typeof name === "string" && name.trim() && ("reason" in body || "rule" in body)) return name.trim().slice(0, 200);
  const loc = body["loc"];
  if (Array.isArray(loc) && loc.length) {
    const last: unknown = loc[loc.length - 1];
    if (typeof last === "string" || typeof last === "number") return String(last).slice(0, 200);
  }
  const source = body["source"];
  if (isRecord(source) && typeof source["pointer"] === "string") {
    const pointer = source["pointer"].replace(/\/+$/, "").split("/").pop();
    if (pointer) return pointer.slice(0, 200);
  }
  for (const key of NESTED_KEYS) {
    const nested = body[key];
    if (key === "errors" && isRecord(nested)) {
      const first = Object.keys(nested)[0];
      if (first !== undefined && !isRecord(nested[first])) return first.slice(0, 200);
    }
    const found = fieldNamedIn(nested, depth + 1);
    if (found) return found;
  }
  return null;
}

/** An HTTP error answer of a downstream API, whatever client produced it. */
export interface HttpAnswer {
  status: number;
  header(name: string): string | null;
  /** The parsed JSON body, when there is one. */
  body: unknown;
}

function headerReader(headers: unknown): (name: string) => string | null {
  if (headers && typeof (headers as { get?: unknown }).get === "function") {
    return (name) => (headers as { get(n: string): string | null }).get(name) ?? null;
  }
  if (isRecord(headers)) {
    const lowered = new Map(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
    return (name) => {
      const value = lowered.get(name.toLowerCase());
      return typeof value === "string" ? value : Array.isArray(value) && typeof value[0] === "string" ? value[0] : null;
    };
  }
  return () => null;
}

/** A returned fetch `Response` that is not ok, as an `HttpAnswer` (its JSON body read). */
export async function httpAnswerOf(value: unknown): Promise<HttpAnswer | null> {
  if (!(value instanceof Response) || value.ok) return null;
  let body: unknown = null;
  try {
    body = await value.clone().json();
  } catch {
    body = null;
  }
  return { status: value.status, header: headerReader(value.headers), body };
}

/** A thrown error that carries an HTTP status (OpenAI's APIError, axios', got's, ky's...). */
export function httpAnswerOfError(error: unknown): HttpAnswer | null {
  if (!isRecord(error) && !(error instanceof Error)) return null;
  const e = error as Record<string, unknown>;
  const response = isRecord(e["response"]) || e["response"] instanceof Response ? (e["response"] as Record<string, unknown>) : null;
  const status = [e["status"], e["statusCode"], response?.["status"]].find((s) => Number.isInteger(s) && (s as number) >= 400 && (s as number) <= 599);
  if (typeof status !== "number") return null;
  const headers = e["headers"] ?? response?.["headers"];
  const body = e["error"] ?? e["body"] ?? response?.["data"] ?? null;
  return { status, header: headerReader(headers), body };
}

const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
  "ERR_INVALID_URL",
]);
const AFTER_SENDING_CODES = new Set([
  "ETIMEDOUT",
  "ECONNRESET",
  "EPIPE",
  "UND_ERR_SOCKET",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "UND_ERR_ABORTED",
]);

function errorCodes(error: unknown): string[] {
  const codes: string[] = [];
  let current: unknown = error;
  for (let depth = 0; depth < 5 && isRecord(current); depth++) {
    const code = current["code"];
    if (typeof code === "string") codes.push(code);
    current = current["cause"];
  }
  return codes;
}

/** True when the error says the request never left this process (nothing can be written). */
export function neverSent(error: unknown): boolean {
  return errorCodes(error).some((code) => CONNECT_CODES.has(code));
}

/** True for a timeout, an abort or a broken connection: sent, perhaps written. */
export function timedOutOrAborted(error: unknown): boolean {
  const name = error instanceof Error || isRecord(error) ? (error as { name?: unknown }).name : undefined;
  return name === "TimeoutError" || name === "AbortError" || errorCodes(error).some((code) => AFTER_SENDING_CODES.has(code));
}

function delayFailure(code: string, category: Category, notBefore: Date, retryAfter: number | null, message: string): Failure {
  const safeDetails: Record<string, SafeValue> = {};
  if (retryAfter !== null) safeDetails["retry_after"] = Math.trunc(retryAfter);
  return Failure.retryLater(code, { notBefore, category, safeDetails, agentMessage: message });
}

export interface MappingOptions {
  sideEffects?: boolean;
  now?: Date;
  defaultDelayMs?: number;
}

/** What an HTTP error answer of a downstream API means for the step. */
export function failureForResponse(answer: HttpAnswer, options: MappingOptions = {}): Failure {
  const { sideEffects = true, now = new Date(), defaultDelayMs = DEFAULT_RETRY_DELAY_MS } = options;
  const status = answer.status;
  const message = `HTTP ${status} from the tool's service`;
  if (status === 429 || status === 408 || (status >= 500 && !sideEffects)) {
    const retryAfter = parseRetryAfter(answer.header("Retry-After"), now);
    const delayMs = retryAfter !== null ? retryAfter * 1000 : defaultDelayMs;
    const [code, category]: [string, Category] =
      status === 429 ? ["RATE_LIMITED", "rate_limit"] : status === 408 ? ["REQUEST_TIMEOUT", "dependency"] : ["UPSTREAM_UNAVAILABLE", "dependency"];
    return delayFailure(code, category, new Date(now.getTime() + delayMs), retryAfter, message);
  }
  if (status >= 500) return Failure.outcomeUnknown("UPSTREAM_ERROR", { agentMessage: `${message}; it may have committed` });
  if (status === 401 || status === 403) {
    return Failure.escalate(status === 401 ? "UPSTREAM_UNAUTHORIZED" : "UPSTREAM_FORBIDDEN", { category: "authorization", agentMessage: message });
  }
  if (status === 409) return Failure.escalate("UPSTREAM_CONFLICT", { category: "conflict", agentMessage: message });
  const blamed = fieldNamedIn(answer.body);
  if (blamed) return Failure.invalidInput("INVALID_INPUT", { field: blamed, agentMessage: message });
  return Failure.escalate("REQUEST_REFUSED", { category: "validation", agentMessage: message });
}

function errorName(error: unknown): string {
  if (error instanceof Error) return error.name || "Error";
  return typeof error === "object" && error !== null ? describe(error) : typeof error;
}

/** What an error thrown by a tool call means for the step (see the module's table). */
export function failureForError(error: unknown, options: MappingOptions = {}): Failure {
  const { sideEffects = true, now = new Date(), defaultDelayMs = DEFAULT_RETRY_DELAY_MS } = options;
  const name = errorName(error);
  if (error instanceof ToolError) return error.failure;
  const http = httpAnswerOfError(error);
  if (http) return failureForResponse(http, options);
  if (neverSent(error)) {
    // The request never left this process: nothing can have been written.
    return delayFailure("UPSTREAM_UNREACHABLE", "dependency", new Date(now.getTime() + defaultDelayMs), null, `${name}: the request was not sent`);
  }
  if (timedOutOrAborted(error)) {
    // Sent (or partly sent), then no answer: the write may have happened.
    if (!sideEffects) {
      return delayFailure("UPSTREAM_TIMEOUT", "dependency", new Date(now.getTime() + defaultDelayMs), null, `${name} after the request was sent`);
    }
    return Failure.outcomeUnknown("OUTCOME_UNKNOWN", { agentMessage: `${name} after the request was sent; it may have committed` });
  }
  if (!sideEffects) return Failure.escalate("TOOL_EXCEPTION", { category: "internal", agentMessage: `${name} in the tool call` });
  return Failure.outcomeUnknown("TOOL_EXCEPTION", { category: "internal", agentMessage: `${name} in the tool call; it may have committed` });
}

/** The success envelope; `result` goes along only when it is JSON (Holdpoint keeps only its
 * SHA-256 and size). */
export function successEnvelope(options: {
  tool: string;
  operationRef: string;
  occurredAt: Date;
  result?: unknown;
  attempt?: number | null;
  runId?: string | null;
  correlationId?: string | null;
  evidenceRef?: string | null;
}): Record<string, unknown> {
  const body: Record<string, unknown> = {
    ok: true,
    tool: options.tool,
    operation_ref: options.operationRef,
    commit_state: "committed",
    occurred_at: rfc3339(options.occurredAt),
  };
  if (options.evidenceRef !== null && options.evidenceRef !== undefined) {
    body["verification"] = { checked_at: rfc3339(options.occurredAt), evidence_ref: options.evidenceRef };
  }
  if (options.result !== null && options.result !== undefined) {
    try {
      body["result"] = toJsonValue(options.result, "result");
    } catch {
      // Not JSON (a stream, a class instance): only the envelope goes.
    }
  }
  const optional: [string, unknown][] = [
    ["attempt", options.attempt],
    ["run_id", options.runId],
    ["correlation_id", options.correlationId],
  ];
  for (const [key, value] of optional) if (value !== null && value !== undefined) body[key] = value;
  return body;
}
