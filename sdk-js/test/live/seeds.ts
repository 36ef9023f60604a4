/** The seed scenarios, played in TypeScript against the real server. */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { describe, it } from "node:test";
import { promisify } from "node:util";

import {
  ApprovalPending,
  Failure,
  Holdpoint,
  IdempotencyKeyReused,
  IdenticalRetry,
  InvalidResponse,
  NotFound,
  RetryNotBefore,
  Reviewer,
  RoleRequired,
  StepChanged,
  ToolError,
  ToolHalted,
  Unauthorized,
  VerificationRequired,
  inputFingerprint,
  WebhookVerificationError,
  verifyWebhook,
  type JsonObject,
  type Step,
} from "../../src/index.js";
import type { Downstream } from "../support/downstream.js";
import { freePort, type Live } from "../support/server.js";

const run = promisify(execFile);

export function seedScenarios(ctx: () => { live: Live; downstream: Downstream }): void {
  const client = (): Holdpoint => new Holdpoint(ctx().live.url, ctx().live.apiKey, { timeoutMs: 10_000 });

  describe("seed scenarios", () => {
    it("invalid input, an identical retry refused, then a fixed retry commits", async () => {
      const hp = client();
      const ref = "run_81/step_4";
      const calls: JsonObject[] = [];
      const send = async (input: JsonObject): Promise<Response> => {
        calls.push(input);
        if (!String(input["recipient_email"]).includes("@")) {
          // The provider's own 400, naming the field Stripe-style.
          return new Response(JSON.stringify({ error: { param: "recipient_email", message: "invalid" } }), { status: 400 });
        }
        return new Response(JSON.stringify({ id: "msg_1" }), { status: 200 });
      };
      const bad = { recipient_email: "bob.example.com", subject: "Invoice" };
      const first = await hp.guard("send_email", bad, send, { operationRef: ref, runId: "run_81" });
      assert.equal(first.action, "fix_input");
      assert.equal(first.step?.state, "needs_input");
      assert.equal(first.failure?.code, "INVALID_INPUT");
      assert.equal(first.envelope?.["safe_details"] && (first.envelope["safe_details"] as Record<string, unknown>)["field"], "recipient_email");
      assert.ok(first.inputSent);

      const again = await hp.guard("send_email", bad, send, { operationRef: ref, runId: "run_81" });
      assert.ok(again.refusal instanceof IdenticalRetry, String(again.refusal?.code));
      assert.equal(calls.length, 1, "an identical retry is not made");

      const fixed = await hp.guard("send_email", { ...bad, recipient_email: "bob@example.com" }, send, { operationRef: ref, runId: "run_81" });
      assert.ok(fixed.ok);
      assert.equal(fixed.step?.state, "succeeded");
      assert.equal(fixed.attempt, 2);
      const step = await hp.getStep(ref);
      assert.equal(step.proposal?.input_fingerprint, inputFingerprint({ ...bad, recipient_email: "bob@example.com" }));
    });

    it("a rate limit waits until an absolute not_before, refuses an early retry, then proceeds", async () => {
      const hp = client();
      const ref = "rate/1";
      let calls = 0;
      const read = (): Response => {
        calls += 1;
        return calls === 1 ? new Response("slow down", { status: 429, headers: { "Retry-After": "2" } }) : new Response(JSON.stringify({ rows: 3 }), { status: 200 });
      };
      const limited = await hp.guard("search_orders", { q: "open" }, read, { operationRef: ref, sideEffects: false });
      assert.equal(limited.action, "wait");
      assert.equal(limited.step?.state, "waiting_retry");
      assert.equal(limited.failure?.code, "RATE_LIMITED");
      const notBefore = limited.notBefore;
      assert.ok(notBefore && notBefore.getTime() > Date.now());

      const early = await hp.guard("search_orders", { q: "open" }, read, { operationRef: ref, sideEffects: false });
      assert.ok(early.refusal instanceof RetryNotBefore);
      assert.ok((early.refusal.retryAfter ?? 0) >= 1, `Retry-After ${early.refusal.retryAfter}`);
      assert.equal(calls, 1);

      const ready = await hp.waitForDecision(ref, { timeoutMs: 15_000, initialIntervalMs: 200 });
      assert.ok(Date.now() >= notBefore.getTime());
      assert.notEqual(ready.directive.action, "hold");
      const after = await hp.guard("search_orders", { q: "open" }, read, { operationRef: ref, sideEffects: false });
      assert.ok(after.ok, after.refusal?.code);
      assert.deepEqual(after.result && (await (after.result as Response).json()), { rows: 3 });
    });

    it("a timeout after the request was sent is unknown: the gate refuses a second write until verification", async () => {
      const hp = client();
      const { downstream } = ctx();
      const charge = (path: string) => async (input: JsonObject, context: { signal: AbortSignal }) => {
        const answer = await fetch(downstream.url + path, { method: "POST", body: JSON.stringify(input), signal: context.signal });
        return (await answer.json()) as unknown;
      };
      const ref = "charge/1";
      const unknown = await hp.guard("charge_card", { amount_cents: 1250 }, charge("/hang"), { operationRef: ref, timeoutMs: 300, verificationTool: "get_charge" });
      assert.equal(unknown.action, "verify");
      assert.equal(unknown.step?.state, "verifying");
      assert.equal(unknown.failure?.commitState, "unknown");
      assert.equal((unknown.envelope?.["safe_details"] as Record<string, unknown>)["verification_tool"], "get_charge");
      assert.ok(downstream.received.some((r) => r.path === "/hang"), "the request was sent");

      const twice = await hp.guard("charge_card", { amount_cents: 1250 }, charge("/charge"), { operationRef: ref });
      assert.ok(twice.refusal instanceof VerificationRequired);
      assert.equal(downstream.received.filter((r) => r.path === "/charge").length, 0, "no second write before the lookup");

      const early = await hp.reportVerification(ref, { outcome: "not_found" });
      assert.equal(early.step.state, "verifying", "not_found inside the consistency window is not trusted");
      assert.ok(early.directive.not_before);
      const verified = await hp.reportVerification(ref, { outcome: "committed", evidenceRef: "ch_1" });
      assert.equal(verified.step.state, "succeeded");

      // Aborted by the caller while the call runs: the same, unknown.
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 200);
      const aborted = await hp.guard("charge_card", { amount_cents: 99 }, charge("/hang"), { operationRef: "charge/2", signal: controller.signal });
      assert.equal(aborted.failure?.commitState, "unknown");
      assert.equal(aborted.step?.state, "verifying");

      // Refused before it left (nothing listens there): not committed, retry later.
      const closed = await freePort();
      const refused = await hp.guard("charge_card", { amount_cents: 5 }, async (input) => (await fetch(`http://127.0.0.1:${closed}/charge`, { method: "POST", body: JSON.stringify(input) })).json(), { operationRef: "charge/3" });
      assert.equal(refused.failure?.code, "UPSTREAM_UNREACHABLE");
      assert.equal(refused.failure?.commitState, "not_committed");
      assert.equal(refused.step?.state, "waiting_retry");
    });

    it("an approval decided by a reviewer through the API with an edited input: the guard runs exactly that", async () => {
      const { live } = ctx();
      const hp = client();
      const reviewer = new Reviewer(live.url, live.reviewerToken);
      const viewer = new Reviewer(live.url, live.viewerToken);
      const ref = "refund/1";
      const ran: JsonObject[] = [];
      const refund = (input: JsonObject): JsonObject => {
        ran.push(input);
        if (Number(input["amount"]) > 500) throw new ToolError(Failure.approvalRequired("REFUND_ABOVE_LIMIT", { safeDetails: { limit: 500 } }));
        return { refund: "re_1", amount: input["amount"] ?? null };
      };
      const decide = (async (): Promise<Step> => {
        let held: Step | undefined;
        for (let i = 0; i < 100 && !held; i++) {
          for await (const step of reviewer.queue(live.team, { kind: "approvals" })) if (step.operation_ref === ref) held = step;
          if (!held) await new Promise((r) => setTimeout(r, 100));
        }
        assert.ok(held, "the held step is in the approvals queue");
        const seen = await reviewer.step(live.team, ref);
        assert.deepEqual(seen.step.proposal?.input, { amount: 900, order: "ord_7" });
        await assert.rejects(viewer.decide(live.team, ref, { action: "approve", etag: seen.etag }), RoleRequired);
        await assert.rejects(reviewer.decide(live.team, ref, { action: "approve", etag: '"stale"' }), StepChanged);
        const answer = await reviewer.decide(live.team, ref, { action: "approve", etag: seen.etag, reason: "capped at the limit", input: { amount: 500, order: "ord_7" } });
        return answer.step;
      })();
      const outcome = await hp.guard("refund", { amount: 900, order: "ord_7" }, refund, { operationRef: ref, waitForHoldMs: 30_000, pollIntervalMs: 100, maxPollIntervalMs: 300 });
      const decided = await decide;
      assert.equal(decided.directive.input?.["amount"], 500);
      assert.ok(outcome.ok, `${outcome.action} ${outcome.refusal?.code ?? ""}`);
      assert.ok(outcome.inputEdited);
      assert.deepEqual(ran, [{ amount: 900, order: "ord_7" }, { amount: 500, order: "ord_7" }]);
      assert.deepEqual(outcome.result, { refund: "re_1", amount: 500 });
      const step = await hp.getStep(ref);
      assert.equal(step.state, "succeeded");
      assert.equal(step.decisions[0]?.edited, true);
      assert.equal(step.decisions[0]?.input_fingerprint, inputFingerprint({ amount: 500, order: "ord_7" }));

      // Without a wait the hold is the outcome; an agent that asks again meanwhile is refused.
      const held = await hp.guard("refund", { amount: 800 }, refund, { operationRef: "refund/2" });
      assert.equal(held.action, "hold");
      const pending = await hp.guard("refund", { amount: 800 }, refund, { operationRef: "refund/2" });
      assert.ok(pending.refusal instanceof ApprovalPending);
      const bounded = await hp.guard("refund", { amount: 800 }, refund, { operationRef: "refund/2", waitForHoldMs: 300, pollIntervalMs: 100 });
      assert.ok(bounded.holdTimedOut && bounded.refusal instanceof ApprovalPending);
    });

    it("an outage halts the tool: every attempt is refused with Retry-After until not_before", async () => {
      const hp = client();
      const down = (): never => {
        throw new ToolError(Failure.serviceOutage("LEDGER_UNAVAILABLE", { notBefore: new Date(Date.now() + 120_000) }));
      };
      const first = await hp.guard("ledger_entry", { entry: 1 }, down, { operationRef: "ledger/1" });
      assert.equal(first.step?.state, "waiting_retry");
      let ran = false;
      const other = await hp.guard("ledger_entry", { entry: 2 }, () => {
        ran = true;
      }, { operationRef: "ledger/2" });
      assert.ok(other.refusal instanceof ToolHalted, other.refusal?.code);
      assert.ok((other.refusal.retryAfter ?? 0) > 60, `Retry-After ${other.refusal.retryAfter}`);
      assert.equal(ran, false);
      await assert.rejects(
        hp.requestAttempt("ledger/3", { tool: "ledger_entry", inputFingerprint: inputFingerprint({ entry: 3 }) }),
        (e: unknown) => e instanceof ToolHalted && e.status === 409 && e.directive.may_write === false,
      );
    });

    it("an input the gate refuses goes as its fingerprint only; sendInput: false keeps it here", async () => {
      const hp = client();
      let deep: JsonObject = { leaf: 1 };
      for (let i = 0; i < 40; i++) deep = { d: deep };
      const warnings: string[] = [];
      const warn = console.warn;
      console.warn = (message: string) => warnings.push(message);
      let fallback;
      try {
        fallback = await hp.guard("create_invoice", deep, () => ({ id: 2 }), { operationRef: "in/deep" });
      } finally {
        console.warn = warn;
      }
      assert.ok(fallback.ok && !fallback.inputSent);
      assert.match(warnings.join("\n"), /refused the input of create_invoice on in\/deep \(max_depth\)/);
      const again = await hp.guard("create_invoice", deep, () => ({ id: 3 }), { operationRef: "in/deep" });
      assert.equal(again.refusal?.code, "already_committed", "the write stayed gated by its fingerprint");
      const kept = await hp.guard("create_invoice", { iban: "DE89 3704" }, () => ({ id: 4 }), { operationRef: "in/private", sendInput: false });
      assert.ok(kept.ok && !kept.inputSent);
      assert.equal((await hp.getStep("in/private")).proposal?.input ?? null, null);
    });

    it("a server that is not Holdpoint: an InvalidResponse naming what is missing, nothing run", async () => {
      const { downstream } = ctx();
      const elsewhere = new Holdpoint(downstream.url, ctx().live.apiKey);
      await assert.rejects(elsewhere.getStep("x/1"), (e: unknown) => e instanceof InvalidResponse && e.missing === "answer.operation_ref");
      let ran = false;
      await assert.rejects(
        elsewhere.guard("create_invoice", { amount: 1 }, () => {
          ran = true;
        }),
        (e: unknown) => e instanceof InvalidResponse && e.missing === "status 201",
      );
      assert.equal(ran, false);
    });

    it("verifyWebhook accepts what the Python SDK signs, and nothing else", async () => {
      const { live } = ctx();
      const secret = "whsec_" + Buffer.from("a 32-byte webhook secret for it!").toString("base64");
      const body = JSON.stringify({ type: "step.decided", timestamp: new Date().toISOString(), data: { step: { operation_ref: "w/1" } } });
      const timestamp = Math.floor(Date.now() / 1000);
      const { stdout } = await run(live.python, ["-c", "import sys; from holdpoint_sdk import sign_webhook; print(sign_webhook(sys.argv[1], message_id='msg_py', timestamp=int(sys.argv[2]), body=sys.argv[3]))", secret, String(timestamp), body]);
      const headers = { "webhook-id": "msg_py", "webhook-timestamp": String(timestamp), "webhook-signature": stdout.trim() };
      assert.deepEqual(verifyWebhook(body, headers, secret).data, { step: { operation_ref: "w/1" } });
      assert.throws(() => verifyWebhook(body + " ", headers, secret), WebhookVerificationError);
    });

    it("reads: If-None-Match, the cursor, replayed and reused Idempotency-Keys, a wrong key", async () => {
      const { live } = ctx();
      const hp = client();
      const first = await hp.getStepIfChanged("run_81/step_4", null);
      assert.ok(first.modified && first.etag);
      const again = await hp.getStepIfChanged("run_81/step_4", first.etag);
      assert.equal(again.modified, false);
      assert.equal(again.step, null);
      const refs: string[] = [];
      for await (const step of hp.listSteps({ tool: "charge_card", pageSize: 1 })) refs.push(step.operation_ref);
      assert.deepEqual(refs.sort(), ["charge/1", "charge/2", "charge/3"]);
      const envelope = { ok: true, tool: "notes", operation_ref: "notes/1", commit_state: "committed" };
      const posted = await hp.postEnvelope(envelope, { idempotencyKey: "env_fixed_1" });
      const replayed = await hp.postEnvelope(envelope, { idempotencyKey: "env_fixed_1" });
      assert.equal(replayed.envelope_id, posted.envelope_id);
      await assert.rejects(hp.postEnvelope({ ...envelope, operation_ref: "notes/2" }, { idempotencyKey: "env_fixed_1" }), IdempotencyKeyReused);
      await assert.rejects(hp.getStep("no/such/step"), NotFound);
      assert.ok((await hp.toolCodes("charge_card")).tool === "charge_card");
      await assert.rejects(new Holdpoint(live.url, "hp_not_a_real_key").getStep("run_81/step_4"), Unauthorized);
    });
  });
}
