/**
 * The OpenAI Agents SDK adapter (`@openai/agents` 0.14): a function tool whose `needsApproval`
 * is answered by Holdpoint's attempt gate and whose `execute` is guarded.
 *
 *   import { holdpointAgentTool, awaitHoldpointDecisions } from "@holdpoint/sdk/openai-agents";
 *   const refund = holdpointAgentTool(hp, {
 *     name: "refund", description: "Refund an order",
 *     parameters: z.object({ order: z.string(), amount: z.number() }),
 *     execute: (input) => payments.refund(input),
 *   });
 *   let result = await run(agent, "Refund order 7");
 *   while (result.interruptions.length > 0) {
 *     await awaitHoldpointDecisions(hp, result, { timeoutMs: 600_000 });
 *     result = await run(agent, result.state);
 *   }
 *
 * `needsApproval` asks the gate. Granted: no approval is needed, and `execute` uses that grant
 * (it is not asked twice). Held (the step awaits a reviewer): the run is interrupted, and
 * `awaitHoldpointDecisions` waits for Holdpoint's decision and approves or rejects the
 * interruption accordingly; on resume `execute` asks the gate again, which grants exactly
 * the approved (possibly edited) input, and that is the input the call runs. Any other
 * refusal, and any failure, reaches the model as a `HoldpointNotice` (the call not made).
 */

import { randomUUID } from "node:crypto";
import {
  tool,
  type FunctionTool,
  type RunContext as AgentsRunContext,
  type RunToolApprovalItem,
  type ToolExecuteArgument,
  type ToolInputParameters,
} from "@openai/agents";

import type { Holdpoint } from "../client.js";
import { DecisionTimeout } from "../errors.js";
import { GuardedCall, type GuardOptions, type RunContext } from "../guard.js";
import type { JsonObject } from "../types.js";
import { defaultOperationRef } from "./refs.js";
import { noticeOf, type HoldpointNotice } from "./notice.js";

export { isNotice, type HoldpointNotice } from "./notice.js";

type ToolCallDetails = Parameters<NonNullable<FunctionTool["invoke"]>>[2];

export interface HoldpointAgentToolOptions<TParameters extends ToolInputParameters, Result>
  extends Omit<GuardOptions, "operationRef" | "signal"> {
  name: string;
  description: string;
  /** A zod object (or a JSON schema) for the input; it must describe a JSON object. */
  parameters: TParameters;
  strict?: boolean;
  /** The call itself, given the input to run (after an edited approval, the reviewer's). */
  execute: (
    input: ToolExecuteArgument<TParameters>,
    context: { runContext: AgentsRunContext<unknown> | undefined; details: ToolCallDetails | undefined; holdpoint: RunContext },
  ) => Result | Promise<Result>;
  /** The step of a call (default: `<runId>/<tool>/<fingerprint>`: the same call in one run
   * is the same operation, so a repeated call after a hold is the held step). */
  operationRef?: (input: ToolExecuteArgument<TParameters>) => string;
}

// callId -> what needsApproval learnt, for execute (granted) and awaitHoldpointDecisions (held).
const MAX_REMEMBERED = 1024;
const granted = new Map<string, GuardedCall>();
const held = new Map<string, { hp: Holdpoint; operationRef: string }>();

function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  while (map.size >= MAX_REMEMBERED) {
    const first = map.keys().next().value;
    if (first === undefined) break;
    map.delete(first);
  }
  map.set(key, value);
}

/** An Agents SDK function tool named `name` in Holdpoint, gated and guarded. */
export function holdpointAgentTool<TParameters extends ToolInputParameters, Result>(
  hp: Holdpoint,
  options: HoldpointAgentToolOptions<TParameters, Result>,
): FunctionTool<unknown, TParameters, Result | HoldpointNotice> {
  const { name, description, parameters, strict, execute, operationRef, ...guardOptions } = options;
  const runId = guardOptions.runId ?? `agents_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const refOf = (input: ToolExecuteArgument<TParameters>): string =>
    operationRef ? operationRef(input) : defaultOperationRef(runId, name, input);
  const optionsFor = (input: ToolExecuteArgument<TParameters>): GuardOptions => ({ ...guardOptions, runId, operationRef: refOf(input) });

  const definition = {
    name,
    description,
    parameters,
    ...(strict !== undefined ? { strict } : {}),
    needsApproval: async (_context: AgentsRunContext, input: ToolExecuteArgument<TParameters>, callId?: string): Promise<boolean> => {
      const call = await GuardedCall.begin(hp, name, input as Record<string, unknown>, optionsFor(input));
      if (call.refusal && call.directive.action === "hold") {
        if (callId) remember(held, callId, { hp, operationRef: call.operationRef });
        return true;
      }
      // Granted, or refused for another reason: execute runs (or reports) this very answer.
      if (callId) remember(granted, callId, call);
      return false;
    },
    execute: async (input: ToolExecuteArgument<TParameters>, runContext?: AgentsRunContext<unknown>, details?: ToolCallDetails): Promise<Result | HoldpointNotice> => {
      const callId = details?.toolCall?.callId;
      let call = callId ? granted.get(callId) : undefined;
      if (callId) granted.delete(callId);
      // Resumed after an approval (needsApproval is not asked again), or run without it.
      call ??= await GuardedCall.begin(hp, name, input as Record<string, unknown>, optionsFor(input));
      const outcome = await call.run(
        (approved: JsonObject, holdpoint: RunContext) =>
          execute(approved as ToolExecuteArgument<TParameters>, { runContext, details, holdpoint }),
        details?.signal ? { signal: details.signal } : {},
      );
      return outcome.ok ? (outcome.result as Result) : noticeOf(outcome);
    },
  };
  return tool(definition as never) as unknown as FunctionTool<unknown, TParameters, Result | HoldpointNotice>;
}

export interface Interrupted {
  interruptions: RunToolApprovalItem[];
  state: {
    approve(item: RunToolApprovalItem, options?: { alwaysApprove?: boolean }): void;
    reject(item: RunToolApprovalItem, options?: { alwaysReject?: boolean; message?: string }): void;
  };
}

export interface DecisionCounts {
  approved: number;
  rejected: number;
  /** Still undecided when the wait ended: left for the next call (or for you). */
  pending: number;
  /** Interruptions of tools that are not Holdpoint's: left for you. */
  others: number;
}

/**
 * For each interruption raised by a Holdpoint tool, wait (within `timeoutMs`) for the
 * reviewer's decision on its step, then approve it in the run state when Holdpoint released
 * the step, or reject it (with Holdpoint's notice as the model's message) when it did not.
 */
export async function awaitHoldpointDecisions(
  hp: Holdpoint,
  result: Interrupted,
  options: { timeoutMs?: number; signal?: AbortSignal; pollIntervalMs?: number; maxPollIntervalMs?: number } = {},
): Promise<DecisionCounts> {
  const counts: DecisionCounts = { approved: 0, rejected: 0, pending: 0, others: 0 };
  const deadline = Date.now() + (options.timeoutMs ?? 600_000);
  for (const item of result.interruptions) {
    const callId = (item.rawItem as { callId?: unknown }).callId;
    const known = typeof callId === "string" ? held.get(callId) : undefined;
    if (!known || known.hp !== hp) {
      counts.others += 1;
      continue;
    }
    let step;
    try {
      step = await hp.waitForDecision(known.operationRef, {
        timeoutMs: Math.max(0, deadline - Date.now()),
        initialIntervalMs: options.pollIntervalMs ?? 1000,
        maxIntervalMs: options.maxPollIntervalMs ?? 15_000,
        waitingActions: new Set(["hold"]),
        ...(options.signal ? { signal: options.signal } : {}),
      });
    } catch (error) {
      if (error instanceof DecisionTimeout) {
        counts.pending += 1;
        continue;
      }
      throw error;
    }
    held.delete(callId as string);
    if (step.directive.action === "proceed") {
      result.state.approve(item);
      counts.approved += 1;
    } else {
      const notice = {
        holdpoint: { action: step.directive.action, reason: step.directive.reason, operation_ref: step.operation_ref, step_url: step.url, message: "A Holdpoint reviewer did not release this call: do not call it again." },
      };
      result.state.reject(item, { message: JSON.stringify(notice) });
      counts.rejected += 1;
    }
  }
  return counts;
}
