/**
 * An agent that plays the seed scenarios against a running Holdpoint, with the TypeScript SDK.
 *
 *   scripts/run                                  # prints "API key (shown once):" and the key
 *   cd sdk-js && npm ci && npm run example -- --api-key hp_...
 *
 * (or HOLDPOINT_URL / HOLDPOINT_API_KEY in the environment; the URL defaults to scripts/run's
 * http://127.0.0.1:8000). The tools call a fake provider inside this process, so the only
 * server needed is Holdpoint. Each scenario prints what the agent did and what Holdpoint told
 * it; the exit code is 0 when every directive was the one the contract promises.
 *
 * Scenarios (`--scenario NAME`, default all):
 *   invalid_input    the provider refuses an address -> fix_input; a corrected input is granted
 *   rate_limit       the provider answers 429 Retry-After: 2 -> wait until not_before, then retry
 *   unknown_outcome  the write times out after it left -> verify; a retry is refused; the lookup
 *                    by operation_ref finds the invoice -> committed
 *   approval         a refund over the limit -> hold; prints the step page for a reviewer (with
 *                    --wait-for-approval SECONDS the agent waits for the decision, then runs the
 *                    input the reviewer approved: theirs if they edited it)
 *   outage           the provider is down (scope: service) -> the tool is halted; the next call
 *                    on another step is refused with tool_halted
 */

// Built into sdk-js/build/example/, where "@holdpoint/sdk" is the package itself.
import { Failure, Holdpoint, HoldpointError, ToolError, newOperationRef, type JsonObject, type Outcome } from "@holdpoint/sdk";

const SCENARIOS = ["invalid_input", "rate_limit", "unknown_outcome", "approval", "outage"] as const;
type Scenario = (typeof SCENARIOS)[number];

function option(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

const baseUrl = option("base-url") ?? process.env["HOLDPOINT_URL"] ?? "http://127.0.0.1:8000";
const apiKey = option("api-key") ?? process.env["HOLDPOINT_API_KEY"] ?? "";
const only = option("scenario");
const waitForApproval = Number(option("wait-for-approval") ?? "0");
const run = option("run-id") ?? newOperationRef("run");

/** The downstream API the agent's tools call, with the failures of the seeds. */
class FakeProvider {
  readonly invoices = new Map<string, JsonObject>();
  searches = 0;

  async sendEmail(input: JsonObject): Promise<Response> {
    if (!String(input["to"]).includes("@")) {
      return Response.json({ error: { param: "to", message: "not an address" } }, { status: 400 });
    }
    return Response.json({ id: "msg_1" });
  }

  async searchContacts(): Promise<Response> {
    this.searches += 1;
    return this.searches === 1 ? new Response("slow down", { status: 429, headers: { "Retry-After": "2" } }) : Response.json({ contacts: 3 });
  }

  /** Creates the invoice, then the answer is lost: a timeout after the write left. */
  async createInvoice(input: JsonObject, ref: string, signal: AbortSignal): Promise<never> {
    this.invoices.set(ref, input);
    return new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }));
  }

  refund(input: JsonObject): JsonObject {
    if (Number(input["amount"]) > 500) throw new ToolError(Failure.approvalRequired("REFUND_ABOVE_LIMIT", { safeDetails: { limit: 500 } }));
    return { refund: "re_1", amount: input["amount"] ?? null };
  }

  ledger(): never {
    throw new ToolError(Failure.serviceOutage("LEDGER_UNAVAILABLE", { notBefore: new Date(Date.now() + 60_000) }));
  }
}

function show(label: string, outcome: Outcome<unknown>): void {
  const code = outcome.refusal?.code ?? outcome.failure?.code ?? "";
  console.log(`  ${label}: ${outcome.action} (${outcome.step?.state ?? "no step"}${code ? `, ${code}` : ""})`);
}

function expect(what: string, ok: boolean): boolean {
  if (!ok) console.log(`  UNEXPECTED: ${what}`);
  return ok;
}

async function play(hp: Holdpoint, provider: FakeProvider, scenario: Scenario): Promise<boolean> {
  const ref = `${run}/${scenario}`;
  switch (scenario) {
    case "invalid_input": {
      const bad = await hp.guard("send_email", { to: "bob.example.com", subject: "Invoice" }, (input) => provider.sendEmail(input), { operationRef: ref, runId: run });
      show("bad address", bad);
      const fixed = await hp.guard("send_email", { to: "bob@example.com", subject: "Invoice" }, (input) => provider.sendEmail(input), { operationRef: ref, runId: run });
      show("fixed address", fixed);
      return expect("fix_input then committed", bad.action === "fix_input" && fixed.ok);
    }
    case "rate_limit": {
      const limited = await hp.guard("search_contacts", { q: "bob" }, () => provider.searchContacts(), { operationRef: ref, runId: run, sideEffects: false });
      show("429", limited);
      await hp.waitForDecision(ref, { timeoutMs: 30_000, initialIntervalMs: 250 });
      const retried = await hp.guard("search_contacts", { q: "bob" }, () => provider.searchContacts(), { operationRef: ref, runId: run, sideEffects: false });
      show("after not_before", retried);
      return expect("wait then committed", limited.action === "wait" && retried.ok);
    }
    case "unknown_outcome": {
      const invoice = { customer: "cus_1", amount: 1250 };
      const lost = await hp.guard("create_invoice", invoice, (input, context) => provider.createInvoice(input, ref, context.signal), {
        operationRef: ref,
        runId: run,
        timeoutMs: 300,
        verificationTool: "get_invoice_by_operation_ref",
      });
      show("timeout", lost);
      const again = await hp.guard("create_invoice", invoice, () => ({ invoice: "inv_2" }), { operationRef: ref, runId: run });
      show("retry", again);
      const found = provider.invoices.has(ref);
      const verified = await hp.reportVerification(ref, { outcome: found ? "committed" : "not_found", evidenceRef: "inv_1" });
      console.log(`  lookup by operation_ref: ${found ? "found" : "not found"} -> ${verified.step.state}`);
      return expect("verify, refused, committed", lost.action === "verify" && again.refused && verified.step.state === "succeeded");
    }
    case "approval": {
      const held = await hp.guard("refund", { order: "ord_7", amount: 900 }, (input) => provider.refund(input), {
        operationRef: ref,
        runId: run,
        waitForHoldMs: waitForApproval * 1000,
      });
      show("refund of 900", held);
      if (held.action === "hold") console.log(`  a reviewer decides at ${held.stepUrl}`);
      if (held.ok) console.log(`  ran ${JSON.stringify(held.input)}${held.inputEdited ? " (the reviewer's edit)" : ""}`);
      return expect("hold (or, after a wait, the approved run)", held.action === "hold" || held.ok || held.action === "stop");
    }
    case "outage": {
      const down = await hp.guard("post_ledger", { entry: 1 }, () => provider.ledger(), { operationRef: ref, runId: run });
      show("outage", down);
      const next = await hp.guard("post_ledger", { entry: 2 }, () => ({ posted: true }), { operationRef: `${ref}/next`, runId: run });
      show("next call", next);
      if (next.refusal?.retryAfter) console.log(`  Retry-After: ${next.refusal.retryAfter} s`);
      return expect("halted", down.action === "wait" && next.refusal?.code === "tool_halted");
    }
  }
}

async function main(): Promise<number> {
  let hp: Holdpoint;
  try {
    hp = new Holdpoint(baseUrl, apiKey);
  } catch (error) {
    console.error(`${(error as Error).message}\nPass --api-key hp_... (scripts/run prints one) or set HOLDPOINT_API_KEY.`);
    return 2;
  }
  const provider = new FakeProvider();
  const chosen = only ? SCENARIOS.filter((s) => s === only) : [...SCENARIOS];
  if (chosen.length === 0) {
    console.error(`unknown scenario ${only}; one of ${SCENARIOS.join(", ")}`);
    return 2;
  }
  let failures = 0;
  for (const scenario of chosen) {
    console.log(`${scenario}:`);
    try {
      if (!(await play(hp, provider, scenario))) failures += 1;
    } catch (error) {
      failures += 1;
      console.log(`  ${error instanceof HoldpointError ? `${error.name} (${error.code})` : "error"}: ${(error as Error).message}`);
    }
  }
  console.log(failures ? `${failures} scenario(s) did not go as the contract says` : "every directive was the one the contract promises");
  return failures ? 1 : 0;
}

process.exitCode = await main();
