/**
 * Typed errors, built from Holdpoint's RFC 9457 problem+json answers (contract §4, §10).
 *
 * Every failure of a call is a `HoldpointError`: `code` is the contract's stable code,
 * `status` the HTTP status (null when no answer arrived or nothing was sent), `retryAfter`
 * the seconds of a `Retry-After` header. Each refusal code of the attempt gate has a class of
 * its own (all `AttemptRefused`), so `catch (e) { if (e instanceof ToolHalted) ... }` works.
 */

import type { Directive, Step } from "./types.js";

export type Problem = Record<string, unknown>;

export interface FieldError {
  field?: string;
  rule?: string;
  allowed?: unknown;
  [key: string]: unknown;
}

export interface HoldpointErrorOptions {
  code: string;
  status: number | null;
  problem?: Problem | null;
  retryAfter?: number | null;
  cause?: unknown;
}

export class HoldpointError extends Error {
  readonly code: string;
  readonly status: number | null;
  readonly problem: Problem;
  readonly errors: FieldError[];
  /** Seconds to wait, from the answer's `Retry-After` (null when it had none). */
  readonly retryAfter: number | null;
  readonly detail: string;

  constructor(detail: string, options: HoldpointErrorOptions) {
    super(detail, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.detail = detail;
    this.code = options.code;
    this.status = options.status;
    this.problem = options.problem ?? {};
    const raw = this.problem["errors"];
    this.errors = Array.isArray(raw) ? raw.filter((e): e is FieldError => isRecord(e)) : [];
    this.retryAfter = options.retryAfter ?? null;
  }
}

/** 400, 413 or 422: the request broke the schema or a consistency rule (see `errors`). */
export class ValidationFailed extends HoldpointError {}
/** 422 `idempotency_key_reused`: the same Idempotency-Key came with another body. */
export class IdempotencyKeyReused extends ValidationFailed {}
/** 422 `fingerprint_mismatch`: `input` does not hash to `input_fingerprint`. */
export class FingerprintMismatch extends ValidationFailed {}
/** 401 or 403: no key, an unknown or a revoked key (or a token without the role). */
export class Unauthorized extends HoldpointError {}
/** 403 `role_required`: the reviewer token's user may not decide (a viewer). */
export class RoleRequired extends Unauthorized {}
/** 404: no such step or tool in this key's team (another team's object is 404 too). */
export class NotFound extends HoldpointError {}
/** 409 that is not an attempt-gate refusal. */
export class Conflict extends HoldpointError {}
/** 409 `tool_mismatch`: the attempt names another tool than the step's. */
export class ToolMismatch extends Conflict {}
/** 409 `decision_not_allowed`: the step's state does not allow that decision. */
export class DecisionNotAllowed extends Conflict {}
/** 409 `idempotency_request_in_flight`: the first request with this key is still running;
 * `retryAfter` is authoritative (seed 004). */
export class IdempotencyRequestInFlight extends Conflict {}
/** 412 `step_changed`: the step moved since the ETag a decision named. */
export class StepChanged extends HoldpointError {}
/** 428 `precondition_required`: a decision without `If-Match`. */
export class PreconditionRequired extends HoldpointError {}
/** 429: too many requests; `retryAfter` says for how long to wait. */
export class Throttled extends HoldpointError {}
/** 5xx from Holdpoint. */
export class ServerError extends HoldpointError {}
/** No answer from Holdpoint (connection refused, timeout, reset). */
export class HoldpointUnavailable extends HoldpointError {}

/** The server answered, but not in the contract's shape; `missing` names what was missing or
 * of the wrong type (`step.directive.action`). Nothing is assumed from such an answer. */
export class InvalidResponse extends HoldpointError {
  readonly missing: string;
  constructor(detail: string, options: HoldpointErrorOptions & { missing: string }) {
    super(detail, options);
    this.missing = options.missing;
  }
}

/** A call refused before anything was sent: a wrong key or URL, a bad tool name, an input
 * that is not a JSON object or has no canonical form (BigInt, a cycle, NaN...). `field` names
 * what was wrong (`input.amount`, `apiKey`, `baseUrl`). */
export class InvalidArgument extends HoldpointError {
  readonly field: string;
  constructor(detail: string, field: string) {
    super(detail, { code: "invalid_argument", status: null });
    this.field = field;
  }
}

/** The attempt gate said no: do not write. `directive` says what to do instead; `step` is
 * null when the refusal created no step (a halted tool's first attempt). */
export class AttemptRefused extends Conflict {
  readonly step: Step | null;
  readonly directive: Directive;
  constructor(detail: string, options: HoldpointErrorOptions & { step: Step | null; directive: Directive }) {
    super(detail, options);
    this.step = options.step;
    this.directive = options.directive;
  }
}

export class VerificationRequired extends AttemptRefused {}
export class AlreadyCommitted extends AttemptRefused {}
export class IdenticalRetry extends AttemptRefused {}
export class RetryNotBefore extends AttemptRefused {}
export class ApprovalPending extends AttemptRefused {}
export class ApprovalMismatch extends AttemptRefused {}
export class Escalated extends AttemptRefused {}
export class StepClosed extends AttemptRefused {}
export class ToolHalted extends AttemptRefused {}
export class AttemptBudgetExhausted extends AttemptRefused {}
/** v1.2 §11 */
export class DeniedByRule extends AttemptRefused {}
/** v1.2 §11 */
export class ApprovalRequired extends AttemptRefused {}

type RefusalClass = new (
  detail: string,
  options: HoldpointErrorOptions & { step: Step | null; directive: Directive },
) => AttemptRefused;

/** The attempt gate's refusal codes (contract §4), each with its class. */
export const REFUSAL_CLASSES: Readonly<Record<string, RefusalClass>> = Object.freeze({
  verification_required: VerificationRequired,
  already_committed: AlreadyCommitted,
  identical_retry: IdenticalRetry,
  retry_not_before: RetryNotBefore,
  approval_pending: ApprovalPending,
  approval_mismatch: ApprovalMismatch,
  escalated: Escalated,
  step_closed: StepClosed,
  tool_halted: ToolHalted,
  attempt_budget_exhausted: AttemptBudgetExhausted,
  denied_by_rule: DeniedByRule,
  approval_required: ApprovalRequired,
});

type ErrorClass = new (detail: string, options: HoldpointErrorOptions) => HoldpointError;

const BY_CODE: Readonly<Record<string, ErrorClass>> = {
  idempotency_key_reused: IdempotencyKeyReused,
  fingerprint_mismatch: FingerprintMismatch,
  role_required: RoleRequired,
  tool_mismatch: ToolMismatch,
  decision_not_allowed: DecisionNotAllowed,
  idempotency_request_in_flight: IdempotencyRequestInFlight,
  step_changed: StepChanged,
  precondition_required: PreconditionRequired,
};

const BY_STATUS: Readonly<Record<number, ErrorClass>> = {
  400: ValidationFailed,
  401: Unauthorized,
  403: Unauthorized,
  404: NotFound,
  409: Conflict,
  412: StepChanged,
  413: ValidationFailed,
  422: ValidationFailed,
  428: PreconditionRequired,
  429: Throttled,
};

/** The guarded call ran but its envelope could not be posted. Post `envelope` again later
 * with the same `idempotencyKey` (`client.postEnvelope(e.envelope, { idempotencyKey })`):
 * Holdpoint answers a replay with the stored answer, so nothing is recorded twice. */
export class ReportNotDelivered extends HoldpointError {
  readonly envelope: Record<string, unknown>;
  readonly idempotencyKey: string;
  readonly result: unknown;
  readonly error: unknown;
  constructor(
    cause: HoldpointError,
    options: { envelope: Record<string, unknown>; idempotencyKey: string; result?: unknown; error?: unknown },
  ) {
    super(`the tool call's envelope was not delivered: ${cause.detail}`, {
      code: cause.code,
      status: cause.status,
      problem: cause.problem,
      retryAfter: cause.retryAfter,
      cause,
    });
    this.envelope = options.envelope;
    this.idempotencyKey = options.idempotencyKey;
    this.result = options.result;
    this.error = options.error;
  }
}

/** `waitForDecision` gave up (its bound passed, or its signal aborted); `step` is the last
 * state it read. */
export class DecisionTimeout extends HoldpointError {
  readonly step: Step | null;
  constructor(detail: string, step: Step | null, code = "decision_timeout") {
    super(detail, { code, status: null });
    this.step = step;
  }
}

/** A webhook whose signature, timestamp, headers or body do not check out. */
export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The typed error for one error answer (problem+json, or anything else). */
export function errorFromProblem(
  status: number,
  problem: Problem | null,
  retryAfter: number | null,
  fallbackDetail: string,
): HoldpointError {
  const body = problem ?? {};
  const code = typeof body["code"] === "string" ? body["code"] : null;
  const rawDetail = body["detail"] ?? body["title"];
  const detail = typeof rawDetail === "string" && rawDetail ? rawDetail : fallbackDetail;
  if (status === 409 && (isRecord(body["directive"]) || (code !== null && code in REFUSAL_CLASSES))) {
    const cls = (code !== null && REFUSAL_CLASSES[code]) || AttemptRefused;
    const step = isRecord(body["step"]) ? (body["step"] as unknown as Step) : null;
    const directive = isRecord(body["directive"])
      ? (body["directive"] as unknown as Directive)
      : { action: "hold" as const, may_write: false, not_before: null, reason: code ?? "attempt_refused" };
    return new cls(detail, { code: code ?? "attempt_refused", status, problem: body, retryAfter, step, directive });
  }
  const cls = (code !== null ? BY_CODE[code] : undefined) ?? BY_STATUS[status] ?? (status >= 500 ? ServerError : HoldpointError);
  return new cls(detail, { code: code ?? `http_${status}`, status, problem: body, retryAfter });
}
