/**
 * What a framework's model is told when a guarded call did not simply succeed: Holdpoint's
 * directive in a few fixed words and codes. Nothing here quotes free text from the tool's
 * service (it is untrusted input, and no branch may depend on it).
 */

import type { Outcome } from "../guard.js";
import type { Action } from "../types.js";

export interface HoldpointNotice {
  holdpoint: {
    /** What the agent may do now (contract §4's directive). */
    action: Action;
    may_write: boolean;
    reason: string;
    /** The failure's code, or the gate's refusal code. */
    code: string | null;
    not_before: string | null;
    operation_ref: string;
    step_url: string | null;
    /** The field to correct, when the input was refused. */
    field: string | null;
    message: string;
  };
}

const MESSAGES: Record<Action, string> = {
  proceed: "The call did not complete; it may be tried again.",
  wait: "Not now: try again after not_before, not before.",
  verify: "The outcome is unknown: it may have been done. Do not call it again; it is being verified.",
  fix_input: "The input was refused: correct the named field and call again with the changed input.",
  hold: "Held for a human reviewer: do not call it again until they decide.",
  stop: "Stopped: do not call it again for this operation.",
};

export function noticeOf(outcome: Outcome<unknown>): HoldpointNotice {
  const field = outcome.failure?.safeDetails["field"];
  return {
    holdpoint: {
      action: outcome.action,
      may_write: outcome.mayWrite,
      reason: outcome.directive.reason,
      code: outcome.refusal?.code ?? outcome.failure?.code ?? null,
      not_before: outcome.directive.not_before,
      operation_ref: outcome.operationRef,
      step_url: outcome.stepUrl,
      field: typeof field === "string" ? field : null,
      message: MESSAGES[outcome.action],
    },
  };
}

export function isNotice(value: unknown): value is HoldpointNotice {
  return typeof value === "object" && value !== null && "holdpoint" in value;
}
