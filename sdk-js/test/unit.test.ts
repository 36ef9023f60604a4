/** What needs no server: the shared JCS corpus, bad input refused before anything is sent,
 * answers not of the contract's shape, problem+json to typed errors, the failure table and
 * webhook checks. */

import assert from "node:assert/strict";
import { createHash, createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import {
  AlreadyCommitted,
  ApprovalPending,
  AttemptRefused,
  DecisionTimeout,
  Failure,
  GuardedCall,
  Holdpoint,
  HoldpointUnavailable,
  IdempotencyRequestInFlight,
  InvalidArgument,
  InvalidResponse,
  REFUSAL_CLASSES,
  ReportNotDelivered,
  Reviewer,
  StepChanged,
  Throttled,
  ToolError,
  ToolHalted,
  ValidationFailed,
  WebhookVerificationError,
  canonicalJson,
  failureForError,
  failureForResponse,
  inputFingerprint,
  signWebhook,
  verifyWebhook,
} from "../src/index.js";
import { fakeFetch, json, step } from "./support/fake-fetch.js";
import { repoRoot } from "./support/paths.js";
import { freePort } from "./support/server.js";

interface Case {
  name: string;
  input: unknown;
  canonical: string;
  sha256: string;
}
const CORPUS = JSON.parse(readFileSync(join(repoRoot(), "tests", "fixtures", "jcs_corpus.json"), "utf8")) as Case[];

describe("the shared JCS corpus", () => {
  it("is the one the Python SDK reads, with the cases serialisers disagree on", () => {
    assert.ok(CORPUS.length >= 30);
    const names = CORPUS.map((c) => c.name).join(" ");
    for (const needed of ["1e21", "0.1", "minus zero", "astral", "non-ASCII", "nested arrays", "empty object", "escapes"]) {
      assert.ok(names.includes(needed), needed);
    }
  });
  for (const c of CORPUS) {
    it(`gives the Python SDK's fingerprint: ${c.name}`, () => {
      assert.equal(canonicalJson(c.input), c.canonical);
      assert.equal(inputFingerprint(c.input), c.sha256);
      assert.equal(createHash("sha256").update(c.canonical, "utf8").digest("hex"), c.sha256);
    });
  }
  it("sorts keys by UTF-16 code units and prints numbers as ECMAScript does", () => {
    assert.equal(canonicalJson({ "\ufb33": 1, "\u{1f600}": 2 }), '{"\u{1f600}":2,"\ufb33":1}');
    assert.equal(canonicalJson([1e21, 1e20, 0.1, -0, 1250.0, 5e-324]), "[1e+21,100000000000000000000,0.1,0,1250,5e-324]");
  });
});

describe("bad input is a typed error before anything is sent", () => {
  const never = () => fakeFetch(() => {
    throw new Error("nothing may be sent");
  });
  const cycle: Record<string, unknown> = { a: 1 };
  cycle["self"] = cycle;
  const cases: [string, unknown, string][] = [
    ["an array", [1, 2], "input"],
    ["a string", "refund 900", "input"],
    ["null", null, "input"],
    ["a BigInt", { amount: 10n }, "input.amount"],
    ["a cycle", cycle, "input.self"],
    ["NaN", { amount: Number.NaN }, "input.amount"],
    ["an infinity", { n: [1, Number.POSITIVE_INFINITY] }, "input.n[1]"],
    ["a Map", { m: new Map([["a", 1]]) }, "input.m"],
    ["a function", { f: () => 1 }, "input.f"],
    ["a lone surrogate", { s: "\ud800" }, "input"],
  ];
  for (const [name, input, field] of cases) {
    it(`refuses ${name} (${field})`, async () => {
      const { fetch, sent } = never();
      const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
      let ran = false;
      await assert.rejects(
        hp.guard("refund", input as Record<string, unknown>, () => {
          ran = true;
        }),
        (error: unknown) => error instanceof InvalidArgument && error.field === field && error.status === null,
      );
      assert.equal(sent.length, 0);
      assert.equal(ran, false);
    });
  }
  it("takes Dates as their ISO string and leaves undefined keys out, as JSON.stringify sends them", () => {
    const when = new Date("2026-01-02T03:04:05.006Z");
    assert.equal(canonicalJson({ at: when, gone: undefined }), '{"at":"2026-01-02T03:04:05.006Z"}');
  });
  it("refuses a bad tool name, a wrong key or a wrong URL", async () => {
    const { fetch, sent } = never();
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
    await assert.rejects(hp.guard("Create Invoice", {}, () => 1), (e: unknown) => e instanceof InvalidArgument && e.field === "tool");
    for (const key of ["", "sk-live-123", "hp_", "hp_with space", "hp_new\nline", "hpr_token"]) {
      assert.throws(() => new Holdpoint("http://hp.test", key, { fetch }), (e: unknown) => e instanceof InvalidArgument && e.field === "apiKey", key);
    }
    for (const url of ["", "hp.test", "ftp://hp.test", "http://user:pw@hp.test", "http://hp.test/?x=1", "not a url"]) {
      assert.throws(() => new Holdpoint(url, "hp_key", { fetch }), (e: unknown) => e instanceof InvalidArgument && e.field === "baseUrl", url);
    }
    assert.throws(() => new Reviewer("http://hp.test", "hp_agent_key", { fetch }), (e: unknown) => e instanceof InvalidArgument && e.field === "token");
    await assert.rejects(hp.getStep(""), InvalidArgument);
    assert.equal(sent.length, 0);
    assert.equal(new Holdpoint("https://hp.test/api/v1/", "hp_key", { fetch }).baseUrl, "https://hp.test");
  });
});

describe("answers that are not of the contract's shape", () => {
  const answers: [string, () => Response, string][] = [
    ["an HTML page", () => new Response("<html>proxy</html>", { status: 201, headers: { "Content-Type": "text/html" } }), "body"],
    ["a grant without its step", () => json(201, { attempt: 1, directive: { action: "proceed", may_write: true, reason: "x" } }), "answer.step"],
    ["a step without a directive action", () => json(201, { attempt: 1, step: step({ directive: { may_write: true, reason: "x" } }), directive: {} }), "answer.step.directive.action"],
    ["an unknown action", () => json(201, { attempt: 1, step: step({ directive: { action: "dance", may_write: true, reason: "x" } }), directive: {} }), "answer.step.directive.action"],
    ["attempts as a string", () => json(201, { attempt: 1, step: step({ attempts: "1" }), directive: {} }), "answer.step.attempts"],
    ["a refusal whose step has no state", () => json(409, { code: "approval_pending", step: step({ state: 7 }), directive: { action: "hold", may_write: false, reason: "approval_pending" } }), "problem.step.state"],
  ];
  for (const [name, answer, missing] of answers) {
    it(`is an InvalidResponse naming what is missing: ${name}`, async () => {
      const { fetch } = fakeFetch(() => answer());
      const hp = new Holdpoint("http://hp.test", "hp_key", { fetch, maxRetries: 0 });
      let ran = false;
      await assert.rejects(
        hp.guard("create_invoice", { amount: 1 }, () => {
          ran = true;
        }),
        (error: unknown) => error instanceof InvalidResponse && error.missing === missing,
      );
      assert.equal(ran, false, "nothing runs on an answer that cannot be read");
    });
  }
  it("a redirect, or a 2xx the contract does not name, is an InvalidResponse too", async () => {
    const redirect = fakeFetch(() => new Response(null, { status: 302, headers: { Location: "https://login.example/" } }));
    await assert.rejects(new Holdpoint("http://hp.test", "hp_key", { fetch: redirect.fetch }).getStep("op_1"), (e: unknown) => e instanceof InvalidResponse && /check baseUrl/.test(e.message));
    const ok200 = fakeFetch(() => json(200, { attempt: 1, step: step(), directive: step()["directive"] }));
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch: ok200.fetch });
    await assert.rejects(hp.requestAttempt("op_1", { tool: "t", inputFingerprint: "0".repeat(64) }), (e: unknown) => e instanceof InvalidResponse && e.missing === "status 201");
  });
  it("an Idempotency-Key still in flight is asked again after its Retry-After, with the same key", async () => {
    const { fetch, sent } = fakeFetch((_, i) =>
      i === 0 ? json(409, { code: "idempotency_request_in_flight", detail: "in flight" }, { "Retry-After": "1" }) : json(201, { attempt: 1, step: step(), directive: step()["directive"] }),
    );
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
    const started = Date.now();
    const grant = await hp.requestAttempt("op_1", { tool: "t", inputFingerprint: "0".repeat(64), idempotencyKey: "att_1" });
    assert.equal(grant.attempt, 1);
    assert.ok(Date.now() - started >= 950, "waited for Retry-After");
    assert.deepEqual(sent.map((s) => s.headers["idempotency-key"]), ["att_1", "att_1"]);
    const once = fakeFetch(() => json(409, { code: "idempotency_request_in_flight" }, { "Retry-After": "1" }));
    await assert.rejects(new Holdpoint("http://hp.test", "hp_key", { fetch: once.fetch }).requestAttempt("op_1", { tool: "t", inputFingerprint: "0".repeat(64) }), IdempotencyRequestInFlight);
    assert.equal(once.sent.length, 1, "without a key the request is not repeated");
  });
  it("an ingest answer without envelope_id, after the call ran, is an InvalidResponse too", async () => {
    const { fetch } = fakeFetch((sent) =>
      sent.url.endsWith("/attempts") ? json(201, { attempt: 1, step: step(), directive: step()["directive"] }) : json(201, { step: step() }),
    );
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
    await assert.rejects(hp.guard("create_invoice", { amount: 1 }, () => ({ id: 1 })), (e: unknown) => e instanceof InvalidResponse && e.missing === "answer.envelope_id");
  });
});

describe("problem+json answers are typed errors", () => {
  it("one class per refusal code, with the step, the directive and retryAfter", async () => {
    for (const [code, cls] of Object.entries(REFUSAL_CLASSES)) {
      const directive = { action: "hold", may_write: false, not_before: null, reason: code };
      const { fetch } = fakeFetch(() => json(409, { type: "about:blank", title: "Refused", status: 409, detail: `refused: ${code}`, code, step: step({ directive }), directive }, { "Retry-After": "42" }));
      const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
      const error = await hp.requestAttempt("op_1", { tool: "refund", inputFingerprint: "0".repeat(64) }).catch((e: unknown) => e);
      assert.ok(error instanceof cls, code);
      assert.ok(error instanceof AttemptRefused);
      assert.equal(error.code, code);
      assert.equal(error.retryAfter, 42);
      assert.equal(error.directive.reason, code);
      assert.equal(error.step?.operation_ref, "op_1");
    }
  });
  it("other codes and statuses", async () => {
    const cases: [Response, new (...args: never[]) => Error, string][] = [
      [json(412, { code: "step_changed", detail: "moved" }), StepChanged, "step_changed"],
      [json(409, { code: "idempotency_request_in_flight" }, { "Retry-After": "1" }), IdempotencyRequestInFlight, "idempotency_request_in_flight"],
      [json(422, { code: "schema_invalid", errors: [{ field: "tool", rule: "pattern" }] }), ValidationFailed, "schema_invalid"],
      [json(429, { code: "throttled" }, { "Retry-After": "7" }), Throttled, "throttled"],
    ];
    for (const [answer, cls, code] of cases) {
      const { fetch } = fakeFetch(() => answer.clone());
      const hp = new Holdpoint("http://hp.test", "hp_key", { fetch, maxRetries: 0 });
      const error = await hp.getStep("op_1").catch((e: unknown) => e);
      assert.ok(error instanceof cls, code);
      assert.equal((error as unknown as { code: string }).code, code);
    }
  });
  it("a guard refused by the gate returns the refusal without running the call", async () => {
    const directive = { action: "stop", may_write: false, not_before: null, reason: "already_committed" };
    const { fetch, sent } = fakeFetch(() => json(409, { code: "already_committed", step: step({ state: "succeeded", directive }), directive }));
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
    let ran = false;
    const outcome = await hp.guard("create_invoice", { amount: 1 }, () => {
      ran = true;
    });
    assert.ok(outcome.refusal instanceof AlreadyCommitted);
    assert.equal(outcome.action, "stop");
    assert.equal(ran, false);
    assert.equal(sent.length, 1);
    assert.match(sent[0]?.headers["idempotency-key"] ?? "", /^att_/);
  });
  it("GuardedCall: the gate first, then a report of a call made elsewhere, once", async () => {
    const { fetch, sent } = fakeFetch((request) =>
      request.url.endsWith("/attempts")
        ? json(201, { attempt: 1, step: step(), directive: step()["directive"] })
        : json(201, { envelope_id: 7, correlation_id: "c", step: step({ state: "needs_input" }), directive: { action: "fix_input", may_write: false, not_before: null, reason: "input_fix_required" }, dropped_detail_keys: [] }),
    );
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch });
    const call = await GuardedCall.begin(hp, "send_email", { to: "bob" }, { operationRef: "op_1" });
    assert.equal(call.refusal, null);
    assert.equal(call.directive.action, "proceed");
    const outcome = await call.reportFailure(Failure.invalidInput("INVALID_RECIPIENT", { field: "to" }));
    assert.equal(outcome.action, "fix_input");
    const envelope = JSON.parse(sent[1]?.body ?? "{}") as Record<string, unknown>;
    assert.deepEqual([envelope["code"], envelope["next_action"], envelope["attempt"]], ["INVALID_RECIPIENT", "correct_input", 1]);
    assert.match(sent[1]?.headers["idempotency-key"] ?? "", /^env_/);
    await assert.rejects(call.reportSuccess({ id: 1 }), /reports one call/);
    assert.equal(sent.length, 2);
  });
  it("a report that cannot be delivered is ReportNotDelivered with the envelope and its key", async () => {
    const { fetch } = fakeFetch((sent) => (sent.url.endsWith("/attempts") ? json(201, { attempt: 1, step: step(), directive: step()["directive"] }) : json(503, { code: "unavailable" })));
    const hp = new Holdpoint("http://hp.test", "hp_key", { fetch, maxRetries: 1 });
    const error = await hp.guard("create_invoice", { amount: 1 }, () => ({ id: 1 })).catch((e: unknown) => e);
    assert.ok(error instanceof ReportNotDelivered);
    assert.match(error.idempotencyKey, /^env_/);
    assert.equal(error.envelope["ok"], true);
  });
  it("no answer at all is HoldpointUnavailable, and a hold wait ends on its signal", async () => {
    const hp = new Holdpoint(`http://127.0.0.1:${await freePort()}`, "hp_key", { maxRetries: 0, timeoutMs: 2000 });
    await assert.rejects(hp.getStep("op_1"), HoldpointUnavailable);
    const held = { action: "hold", may_write: false, not_before: null, reason: "approval_pending" };
    const { fetch } = fakeFetch(() => json(200, step({ state: "awaiting_approval", held: true, directive: held }), { ETag: '"1"' }));
    const waiting = new Holdpoint("http://hp.test", "hp_key", { fetch });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    await assert.rejects(waiting.waitForDecision("op_1", { signal: controller.signal, initialIntervalMs: 20 }), (e: unknown) => e instanceof DecisionTimeout && e.code === "aborted" && e.step?.state === "awaiting_approval");
    assert.ok(ApprovalPending && ToolHalted);
  });
});

describe("what a thrown error means (the failure table)", () => {
  const now = new Date("2026-01-01T00:00:00Z");
  it("maps connect failures, timeouts, HTTP answers and ToolError as the Python SDK does", () => {
    const refused = Object.assign(new TypeError("fetch failed"), { cause: Object.assign(new Error("connect"), { code: "ECONNREFUSED" }) });
    assert.equal(failureForError(refused, { now }).nextAction, "wait_and_retry");
    assert.equal(failureForError(refused, { now }).commitState, "not_committed");
    const timeout = new DOMException("timed out", "TimeoutError");
    assert.deepEqual([failureForError(timeout, { now }).commitState, failureForError(timeout, { now }).nextAction], ["unknown", "verify_operation"]);
    assert.equal(failureForError(timeout, { now, sideEffects: false }).nextAction, "wait_and_retry");
    const reset = Object.assign(new Error("socket hang up"), { code: "ECONNRESET" });
    assert.equal(failureForError(reset, { now }).commitState, "unknown");
    const limited = failureForError(Object.assign(new Error("429"), { status: 429, headers: { "retry-after": "60" } }), { now });
    assert.equal(limited.nextAction, "wait_and_retry");
    assert.equal(limited.notBefore?.toISOString(), "2026-01-01T00:01:00.000Z");
    assert.equal(limited.safeDetails["retry_after"], 60);
    const field = failureForResponse({ status: 400, header: () => null, body: { error: { param: "email" } } });
    assert.deepEqual([field.nextAction, field.safeDetails["field"]], ["correct_input", "email"]);
    assert.equal(failureForResponse({ status: 502, header: () => null, body: null }).commitState, "unknown");
    assert.equal(failureForError(new RangeError("bug")).code, "TOOL_EXCEPTION");
    const mine = Failure.invalidInput("BAD_EMAIL", { field: "to" });
    assert.equal(failureForError(new ToolError(mine)), mine);
  });
  it("builds envelopes that keep the contract's consistency rules", () => {
    const envelope = Failure.outcomeUnknown().envelope({ tool: "t", operationRef: "r", attemptsRemaining: 2, occurredAt: now });
    assert.deepEqual(envelope["retry"], { directive: "never", max_attempts_remaining: 0 });
    const later = Failure.retryLater("RATE", { notBefore: new Date(now.getTime() + 5000) }).envelope({ tool: "t", operationRef: "r", attemptsRemaining: 2, occurredAt: now });
    assert.deepEqual(later["retry"], { directive: "after_delay", max_attempts_remaining: 2, not_before: "2026-01-01T00:00:05.000Z" });
    assert.throws(() => Failure.escalate("lower case", { category: "internal" }), InvalidArgument);
  });
});

describe("verifyWebhook", () => {
  const secret = "whsec_" + Buffer.from("0123456789abcdef0123456789abcdef").toString("base64");
  const body = JSON.stringify({ type: "step.decided", timestamp: "2026-01-01T00:00:00Z", data: { step: {} } });
  it("accepts Holdpoint's signature and refuses a tampered body, an old timestamp or a missing header", () => {
    const now = new Date();
    const headers = { "webhook-id": "msg_1", "webhook-timestamp": String(Math.floor(now.getTime() / 1000)), "webhook-signature": signWebhook(secret, "msg_1", now, body) };
    assert.equal(verifyWebhook(body, headers, secret).type, "step.decided");
    assert.equal(verifyWebhook(body, new Headers(headers), secret).type, "step.decided");
    assert.throws(() => verifyWebhook(body.replace("decided", "deleted"), headers, secret), WebhookVerificationError);
    const old = new Date(now.getTime() - 3600_000);
    const stale = { "webhook-id": "msg_1", "webhook-timestamp": String(Math.floor(old.getTime() / 1000)), "webhook-signature": signWebhook(secret, "msg_1", old, body) };
    assert.throws(() => verifyWebhook(body, stale, secret), WebhookVerificationError);
    assert.throws(() => verifyWebhook(body, { "webhook-id": "msg_1" }, secret), /missing header webhook-timestamp/);
    const notEvent = JSON.stringify({ hello: 1 });
    assert.throws(() => verifyWebhook(notEvent, { ...headers, "webhook-signature": signWebhook(secret, "msg_1", now, notEvent) }, secret), /not a Holdpoint event/);
  });
  it("agrees with the Python SDK's signature (HMAC-SHA256 over id.timestamp.body)", () => {
    const at = new Date(1_700_000_000_000);
    const key = Buffer.from(secret.slice("whsec_".length), "base64");
    const mac = createHmac("sha256", key).update(`msg_1.1700000000.${body}`).digest("base64");
    assert.equal(signWebhook(secret, "msg_1", at, body), `v1,${mac}`);
  });
});
