/**
 * The Vercel AI SDK adapter (`ai` 6): a `tool({...})` whose `execute` is guarded and whose
 * approval is Holdpoint's.
 *
 *   import { holdpointTool } from "@holdpoint/sdk/ai";
 *   const refund = holdpointTool(hp, "refund", {
 *     description: "Refund an order",
 *     inputSchema: z.object({ order: z.string(), amount: z.number() }),
 *     execute: async (input) => payments.refund(input),
 *   });
 *   await generateText({ model, tools: { refund }, prompt, stopWhen: stepCountIs(5) });
 *
 * The AI SDK's own `needsApproval` is left off: Holdpoint's gate and review desk decide. A
 * hold is waited for inside `execute` (`waitForHoldMs`, default ten minutes, ended by the
 * call's abortSignal), and an approval runs exactly the approved (possibly edited) input.
 * Whatever else happens, the model gets a `HoldpointNotice` instead of the tool's result.
 */

import { randomUUID } from "node:crypto";
import { tool, type FlexibleSchema, type Tool, type ToolExecutionOptions } from "ai";

import type { Holdpoint } from "../client.js";
import type { GuardOptions, RunContext } from "../guard.js";
import type { JsonObject } from "../types.js";
import { noticeOf, type HoldpointNotice } from "./notice.js";
import { defaultOperationRef } from "./refs.js";

export { isNotice, type HoldpointNotice } from "./notice.js";
export { defaultOperationRef } from "./refs.js";

export interface HoldpointToolOptions<INPUT, OUTPUT> extends Omit<GuardOptions, "operationRef" | "signal"> {
  description?: string;
  title?: string;
  inputSchema: FlexibleSchema<INPUT>;
  /** The call itself, given the input to run (after an edited approval, the reviewer's). */
  execute: (input: INPUT, options: ToolExecutionOptions & { holdpoint: RunContext }) => OUTPUT | Promise<OUTPUT>;
  /** The step of a call (default: `<runId>/<tool>/<fingerprint>`, so the same call in one
   * run is the same operation, and Holdpoint refuses to write it twice). */
  operationRef?: (input: INPUT, options: ToolExecutionOptions) => string;
}

/** Ten minutes: a reviewer's decision is waited for that long inside `execute`. */
export const DEFAULT_WAIT_FOR_HOLD_MS = 600_000;


/** An AI SDK tool named `name` in Holdpoint, whose `execute` runs through `hp.guard`. */
export function holdpointTool<INPUT extends Record<string, unknown>, OUTPUT>(
  hp: Holdpoint,
  name: string,
  options: HoldpointToolOptions<INPUT, OUTPUT>,
): Tool<INPUT, OUTPUT | HoldpointNotice> {
  const { description, title, inputSchema, execute, operationRef, ...guardOptions } = options;
  const runId = guardOptions.runId ?? `ai_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const definition = {
    ...(description !== undefined ? { description } : {}),
    ...(title !== undefined ? { title } : {}),
    inputSchema,
    needsApproval: false,
    execute: async (input: INPUT, callOptions: ToolExecutionOptions): Promise<OUTPUT | HoldpointNotice> => {
      const ref = operationRef ? operationRef(input, callOptions) : defaultOperationRef(runId, name, input);
      const outcome = await hp.guard(
        name,
        input,
        (approved: JsonObject, context: RunContext) => execute(approved as INPUT, { ...callOptions, abortSignal: context.signal, holdpoint: context }),
        {
          waitForHoldMs: DEFAULT_WAIT_FOR_HOLD_MS,
          ...guardOptions,
          runId,
          operationRef: ref,
          ...(callOptions.abortSignal ? { signal: callOptions.abortSignal } : {}),
        },
      );
      return outcome.ok ? (outcome.result as OUTPUT) : noticeOf(outcome);
    },
  };
  return tool<INPUT, OUTPUT | HoldpointNotice>(definition as unknown as Tool<INPUT, OUTPUT | HoldpointNotice>);
}
