/**
 * Holdpoint's TypeScript SDK: the API client, typed errors, a guard around tool calls, the
 * reviewer API's client and webhook checks. Adapters: `@holdpoint/sdk/ai` (Vercel AI SDK) and
 * `@holdpoint/sdk/openai-agents` (OpenAI Agents SDK).
 *
 *   import { Holdpoint } from "@holdpoint/sdk";
 *   const hp = new Holdpoint("https://holdpoint.example", process.env.HOLDPOINT_API_KEY!);
 *   const outcome = await hp.guard("send_email", message, (input) => mailer.send(input));
 *   console.log(outcome.action, outcome.stepUrl);
 */

export { Holdpoint, Reviewer, VERSION, WAITING_ACTIONS, stepPath, teamPath, teamStepPath } from "./client.js";
export type { ClientOptions, ConditionalStep, Dialect, RequestOptions, ReviewedStep, WaitOptions } from "./client.js";
export { GuardedCall, Outcome, newOperationRef } from "./guard.js";
export type { ReportSuccess } from "./background.js";
export type { GuardOptions, RunContext, ToolRun } from "./guard.js";
export {
  DEFAULT_RETRY_DELAY_MS,
  MAX_INPUT_BYTES,
  Failure,
  ToolError,
  canonicalJson,
  failureForError,
  failureForResponse,
  fieldNamedIn,
  inputFingerprint,
  parseRetryAfter,
  toJsonValue,
} from "./envelopes.js";
export type { Category, CommitState, FailureFields, HttpAnswer, NextAction, SafeValue, Scope } from "./envelopes.js";
export * from "./errors.js";
export type * from "./types.js";
export { signWebhook, verifyWebhook } from "./webhooks.js";
export type { WebhookHeaders } from "./webhooks.js";
