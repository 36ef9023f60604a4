/** Each adapter with a scripted model (no network): the AI SDK's MockLanguageModelV3 and a fake
 * Model for the OpenAI Agents SDK, against the real server. */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Agent, run, setTracingDisabled, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { Failure, Holdpoint, Reviewer, ToolError, type JsonObject, type Step } from "../../src/index.js";
import { holdpointTool, isNotice } from "../../src/adapters/ai.js";
import { awaitHoldpointDecisions, holdpointAgentTool } from "../../src/adapters/openai-agents.js";
import type { Live } from "../support/server.js";

setTracingDisabled(true);

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

function toolCallTurn(id: string, toolName: string, input: unknown) {
  return {
    content: [{ type: "tool-call" as const, toolCallId: id, toolName, input: JSON.stringify(input) }],
    finishReason: { unified: "tool-calls" as const, raw: undefined },
    usage,
    warnings: [],
  };
}

function textTurn(text: string) {
  return { content: [{ type: "text" as const, text }], finishReason: { unified: "stop" as const, raw: undefined }, usage, warnings: [] };
}

/** A Model that answers from a script, turn by turn, and records what it was asked. */
class ScriptedModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(private readonly turns: ModelResponse["output"][]) {}
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    const output = this.turns[this.requests.length - 1];
    if (!output) throw new Error(`the script has no turn ${this.requests.length}`);
    return { usage: new Usage(), output, responseId: `resp_${this.requests.length}` };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not streamed in these tests");
  }
}

function functionCall(callId: string, name: string, input: unknown): ModelResponse["output"][number] {
  return { type: "function_call", id: `fc_${callId}`, callId, name, arguments: JSON.stringify(input), status: "completed" };
}

function message(text: string): ModelResponse["output"][number] {
  return { type: "message", id: `msg_${text.length}`, role: "assistant", status: "completed", content: [{ type: "output_text", text }] };
}

/** The reviewer, through the reviewer API: find the held step, approve it with an edit. */
async function approveWithEdit(live: Live, match: (step: Step) => boolean, edit: (proposal: JsonObject) => JsonObject): Promise<Step> {
  const reviewer = new Reviewer(live.url, live.reviewerToken);
  for (let i = 0; i < 200; i++) {
    for await (const step of reviewer.queue(live.team, { kind: "approvals" })) {
      if (!match(step)) continue;
      const seen = await reviewer.step(live.team, step.operation_ref);
      const proposal = seen.step.proposal?.input;
      assert.ok(proposal, "the reviewer sees the proposed input");
      const answer = await reviewer.decide(live.team, step.operation_ref, { action: "approve", etag: seen.etag, reason: "edited down", input: edit(proposal) });
      return answer.step;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("no held step appeared in the approvals queue");
}

function refundTool(ran: JsonObject[]) {
  return (input: JsonObject): JsonObject => {
    ran.push(input);
    if (Number(input["amount"]) > 500) throw new ToolError(Failure.approvalRequired("REFUND_ABOVE_LIMIT", { safeDetails: { limit: 500 } }));
    return { refund: `re_${ran.length}`, amount: input["amount"] ?? null };
  };
}

export function adapterScenarios(ctx: () => { live: Live }): void {
  describe("adapters with a scripted model", () => {
    it("AI SDK: execute is guarded, the hold is Holdpoint's, the edited input is what runs", async () => {
      const { live } = ctx();
      const hp = new Holdpoint(live.url, live.apiKey);
      const ran: JsonObject[] = [];
      const refund = holdpointTool(hp, "ai_refund", {
        description: "Refund an order",
        inputSchema: z.object({ order: z.string(), amount: z.number() }),
        execute: refundTool(ran),
        runId: "ai-run-1",
        pollIntervalMs: 100,
        maxPollIntervalMs: 300,
      });
      const model = new MockLanguageModelV3({
        doGenerate: [toolCallTurn("call_1", "refund", { order: "ord_1", amount: 900 }), toolCallTurn("call_2", "refund", { order: "ord_1", amount: 900 }), textTurn("Refunded.")],
      });
      const reviewing = approveWithEdit(live, (s) => s.tool === "ai_refund", (p) => ({ ...p, amount: 450 }));
      const result = await generateText({ model, tools: { refund }, prompt: "Refund order 1", stopWhen: stepCountIs(5) });
      const decided = await reviewing;
      assert.equal(decided.directive.input?.["amount"], 450);
      assert.equal(result.text, "Refunded.");
      assert.deepEqual(ran, [{ order: "ord_1", amount: 900 }, { order: "ord_1", amount: 450 }]);
      const outputs = result.steps.flatMap((s) => s.toolResults.map((r) => r.output));
      assert.deepEqual(outputs[0], { refund: "re_2", amount: 450 });
      // The model asked for the same call again: the same operation, which Holdpoint refuses to write twice.
      const again = outputs[1];
      assert.ok(isNotice(again), JSON.stringify(again));
      assert.deepEqual([again.holdpoint.action, again.holdpoint.code], ["stop", "already_committed"]);
      assert.equal(ran.length, 2);
      assert.equal(model.doGenerateCalls.length, 3);
    });

    it("AI SDK: an unknown outcome reaches the model as a notice, not as a result", async () => {
      const { live } = ctx();
      const hp = new Holdpoint(live.url, live.apiKey);
      const charge = holdpointTool(hp, "ai_charge", {
        inputSchema: z.object({ amount_cents: z.number() }),
        execute: () => new Promise<never>(() => undefined), // the provider never answers
        timeoutMs: 200,
        runId: "ai-run-2",
      });
      const model = new MockLanguageModelV3({ doGenerate: [toolCallTurn("c1", "charge", { amount_cents: 700 }), textTurn("Checking.")] });
      const result = await generateText({ model, tools: { charge }, prompt: "Charge 7 euros", stopWhen: stepCountIs(3) });
      const output = result.steps[0]?.toolResults[0]?.output;
      assert.ok(isNotice(output));
      assert.equal(output.holdpoint.action, "verify");
      assert.equal(output.holdpoint.code, "OUTCOME_UNKNOWN");
      assert.match(output.holdpoint.message, /Do not call it again/);
      assert.equal((await hp.getStep(output.holdpoint.operation_ref)).state, "verifying");
    });

    it("OpenAI Agents: needsApproval is the gate's, the interruption is decided in Holdpoint, execute runs the approved input", async () => {
      const { live } = ctx();
      const hp = new Holdpoint(live.url, live.apiKey);
      const ran: JsonObject[] = [];
      const refund = holdpointAgentTool(hp, {
        name: "agents_refund",
        description: "Refund an order",
        parameters: z.object({ order: z.string(), amount: z.number() }),
        execute: refundTool(ran),
        runId: "agents-run-1",
      });
      const args = { order: "ord_2", amount: 800 };
      const model = new ScriptedModel([
        [functionCall("c1", "agents_refund", args)],
        [functionCall("c2", "agents_refund", args)],
        [message("Refund done.")],
      ]);
      const agent = new Agent({ name: "refunds", instructions: "Refund what is asked.", model, tools: [refund] });

      // Turn 1: granted, run, the tool asks for approval: the model is told it is held.
      // Turn 2: the same call again: the gate holds it, so the run is interrupted.
      let result = await run(agent, "Refund order 2");
      assert.equal(result.interruptions.length, 1);
      assert.deepEqual(ran, [args]);
      const told = JSON.stringify(model.requests[1]?.input);
      assert.match(told, /Held for a human reviewer/);

      const reviewing = approveWithEdit(live, (s) => s.tool === "agents_refund", (p) => ({ ...p, amount: 300 }));
      const counts = await awaitHoldpointDecisions(hp, result, { timeoutMs: 30_000, pollIntervalMs: 100, maxPollIntervalMs: 300 });
      await reviewing;
      assert.deepEqual(counts, { approved: 1, rejected: 0, pending: 0, others: 0 });
      result = await run(agent, result.state);
      assert.equal(result.interruptions.length, 0);
      assert.equal(result.finalOutput, "Refund done.");
      assert.deepEqual(ran, [args, { order: "ord_2", amount: 300 }]);
      const steps: Step[] = [];
      for await (const step of hp.listSteps({ tool: "agents_refund" })) steps.push(step);
      assert.equal(steps.length, 1);
      assert.equal(steps[0]?.state, "succeeded");
      assert.equal(steps[0]?.decisions[0]?.edited, true);
    });

    it("OpenAI Agents: a reviewer's rejection rejects the interruption; the call is never made", async () => {
      const { live } = ctx();
      const hp = new Holdpoint(live.url, live.apiKey);
      const ran: JsonObject[] = [];
      const refund = holdpointAgentTool(hp, {
        name: "agents_refund2",
        description: "Refund an order",
        parameters: z.object({ order: z.string(), amount: z.number() }),
        execute: refundTool(ran),
        runId: "agents-run-2",
      });
      const args = { order: "ord_3", amount: 9000 };
      const model = new ScriptedModel([[functionCall("d1", "agents_refund2", args)], [functionCall("d2", "agents_refund2", args)], [message("Not refunded.")]]);
      const agent = new Agent({ name: "refunds", instructions: "Refund what is asked.", model, tools: [refund] });
      let result = await run(agent, "Refund order 3");
      assert.equal(result.interruptions.length, 1);
      const reviewer = new Reviewer(live.url, live.reviewerToken);
      const rejecting = (async () => {
        for (let i = 0; i < 200; i++) {
          for await (const step of reviewer.queue(live.team, { kind: "approvals" })) {
            if (step.tool !== "agents_refund2") continue;
            const seen = await reviewer.step(live.team, step.operation_ref);
            return reviewer.decide(live.team, step.operation_ref, { action: "reject", etag: seen.etag, reason: "too much" });
          }
          await new Promise((r) => setTimeout(r, 100));
        }
        throw new Error("not held");
      })();
      const counts = await awaitHoldpointDecisions(hp, result, { timeoutMs: 30_000, pollIntervalMs: 100, maxPollIntervalMs: 300 });
      await rejecting;
      assert.deepEqual(counts, { approved: 0, rejected: 1, pending: 0, others: 0 });
      result = await run(agent, result.state);
      assert.equal(result.finalOutput, "Not refunded.");
      assert.deepEqual(ran, [args], "the rejected call was never made");
      assert.match(JSON.stringify(model.requests[2]?.input), /did not release this call/);
    });
  });
}
