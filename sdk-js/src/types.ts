/**
 * The wire shapes of the Holdpoint API (contract v1.2, sections 4 and 10). Holdpoint may add
 * fields within v1; it never renames these. Times are RFC 3339 strings.
 */

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export type Action = "proceed" | "wait" | "verify" | "fix_input" | "hold" | "stop";
export type StepState =
  | "in_progress"
  | "needs_input"
  | "waiting_retry"
  | "retry_ready"
  | "verifying"
  | "awaiting_approval"
  | "escalated"
  | "succeeded"
  | "cancelled"
  | "failed";
export type VerificationOutcome = "committed" | "not_found" | "unavailable";

export interface Directive {
  action: Action;
  may_write: boolean;
  not_before: string | null;
  reason: string;
  /** After an approval with an edited input, until an attempt uses it: run exactly this. */
  input?: JsonObject;
  input_fingerprint?: string;
}

export interface EnvelopeSummary {
  envelope_id: number;
  ok: boolean;
  code: string | null;
  category: string | null;
  commit_state: string | null;
  next_action: string | null;
  scope: string | null;
  resource_id: string | null;
  safe_details: Record<string, string | number | boolean>;
  occurred_at: string | null;
}

export interface DecisionRecord {
  action: string;
  reviewer: string;
  reason: string;
  decided_at: string;
  input_fingerprint?: string | null;
  edited?: boolean;
  [key: string]: unknown;
}

export interface Proposal {
  attempt: number;
  input_fingerprint: string;
  input: JsonObject | null;
  input_redacted: boolean;
  proposed_at: string;
}

export interface Step {
  operation_ref: string;
  tool: string;
  state: StepState;
  held: boolean;
  reason: string;
  correlation_id: string | null;
  run_id: string | null;
  attempts: number;
  max_attempts: number;
  not_before: string | null;
  deadline: string | null;
  directive: Directive;
  last_envelope: EnvelopeSummary | null;
  decisions: DecisionRecord[];
  proposal?: Proposal | null;
  /** v1.2: the W3C trace id of the agent's latest call on the step that carried a traceparent. */
  trace_id?: string | null;
  created_at: string;
  updated_at: string;
  url: string;
  [key: string]: unknown;
}

export interface IngestAnswer {
  envelope_id: number;
  correlation_id: string;
  step: Step;
  directive: Directive;
  dropped_detail_keys: string[];
  flags?: string[];
}

export interface AttemptGrant {
  attempt: number;
  step: Step;
  directive: Directive;
}

export interface StepAnswer {
  step: Step;
  directive: Directive;
}

export interface StepPage {
  results: Step[];
  next: string | null;
}

export type DecisionAction = "approve" | "reject" | "mark_committed" | "permit_retry" | "cancel";
export type QueueKind = "approvals" | "verifications" | "escalations";

export interface DecisionAnswer {
  decision: DecisionRecord;
  step: Step;
}

export interface ErrorCodeEntry {
  code: string;
  scope: "tool" | "team";
  category: string;
  retry_class: string;
  next_action: string;
  side_effect: string;
  description: string;
  hint: string;
}

export interface CodeList {
  tool: string;
  codes: ErrorCodeEntry[];
}

export interface SkippedResource {
  resource_id: string;
  correlation_id: string;
  code: string;
  operation_ref: string;
  occurred_at: string;
}

export interface Skipped {
  run_id: string;
  skipped: SkippedResource[];
}

/** The metrics answer is wide and grows with minor versions: read it as a record. */
export type Metrics = Record<string, unknown>;

export interface WebhookEvent {
  type: string;
  timestamp: string;
  data: Record<string, unknown>;
}
