/** Issue 29 point 3, the TypeScript guard: with reportSuccess "after" a success returns at
 * once and its envelope is posted in the background (retried under the same key, flushed by
 * close()); a failure is still reported before the guard returns. Against the real server. */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { AlreadyCommitted, Holdpoint } from "../../src/index.js";
import type { Downstream } from "../support/downstream.js";
import type { Live } from "../support/server.js";

export function reportAfterScenarios(ctx: () => { live: Live; downstream: Downstream }): void {
  describe("reportSuccess: after", () => {
    it("returns a success before its report, which lands once; a failure is reported first", async () => {
      const hp = new Holdpoint(ctx().live.url, ctx().live.apiKey, { timeoutMs: 10_000, reportSuccess: "after" });
      const ref = `after/${Date.now()}`;
      const invoice = { customer: "cus_1", amount: 1250 };
      const done = await hp.guard("create_invoice", invoice, () => ({ id: "inv_1" }), { operationRef: ref });
      assert.ok(done.ok && done.reportPending);
      assert.equal(done.answer, null);
      assert.deepEqual([done.action, done.directive.reason], ["stop", "committed"]);

      // The next gate call on the step waits for its report: refused as committed, not run.
      let ran = false;
      const again = await hp.guard("create_invoice", invoice, () => { ran = true; }, { operationRef: ref });
      assert.ok(again.refusal instanceof AlreadyCommitted, String(again.refusal?.code));
      assert.equal(ran, false);

      // A failure's directive matters: it is reported before the guard returns.
      const failed = await hp.guard("create_invoice", invoice, () => new Response(JSON.stringify({ error: { param: "amount", message: "invalid" } }), { status: 400 }), { operationRef: `${ref}/bad` });
      assert.equal(failed.reportPending, false);
      assert.ok(failed.answer !== null);
      assert.equal(failed.step?.state, "needs_input");

      await hp.close();
      assert.equal(hp.reportsQueued, 0);
      const step = await new Holdpoint(ctx().live.url, ctx().live.apiKey).getStep(ref);
      assert.deepEqual([step.state, step.attempts], ["succeeded", 1]);
    });

    it("is per guard too, and refuses a mode it does not know", async () => {
      const hp = new Holdpoint(ctx().live.url, ctx().live.apiKey, { timeoutMs: 10_000 });
      const ref = `after-guard/${Date.now()}`;
      const done = await hp.guard("create_invoice", { n: 1 }, () => ({}), { operationRef: ref, reportSuccess: "after" });
      assert.ok(done.reportPending);
      assert.ok(await hp.flushReports(10_000));
      assert.equal((await hp.getStep(ref)).state, "succeeded");
      assert.throws(() => new Holdpoint(ctx().live.url, ctx().live.apiKey, { reportSuccess: "later" as "after" }), /reportSuccess/);
    });
  });
}
