/**
 * Checks that an answer has the contract's shape before anything is read from it: a proxy's
 * HTML page, a truncated body or another service on the port must become an
 * `InvalidResponse` naming the missing field, never a guess and never an unhandled rejection.
 * Only the fields the SDK relies on are checked; more fields may come within v1.
 */

import { InvalidResponse, isRecord } from "./errors.js";
import type {
  AttemptGrant,
  CodeList,
  DecisionAnswer,
  Directive,
  IngestAnswer,
  Skipped,
  Step,
  StepAnswer,
  StepPage,
} from "./types.js";

const ACTIONS = new Set(["proceed", "wait", "verify", "fix_input", "hold", "stop"]);

function bad(path: string, expected: string, status: number | null): never {
  throw new InvalidResponse(`Holdpoint's answer is not of the contract's shape: ${path} is missing or not ${expected}`, {
    code: "invalid_response",
    status,
    missing: path,
  });
}

function record(value: unknown, path: string, status: number | null): Record<string, unknown> {
  if (!isRecord(value)) bad(path, "an object", status);
  return value;
}

function str(obj: Record<string, unknown>, key: string, path: string, status: number | null): void {
  if (typeof obj[key] !== "string") bad(`${path}.${key}`, "a string", status);
}

function strOrNull(obj: Record<string, unknown>, key: string, path: string, status: number | null): void {
  const value = obj[key];
  if (value !== null && value !== undefined && typeof value !== "string") bad(`${path}.${key}`, "a string or null", status);
}

function int(obj: Record<string, unknown>, key: string, path: string, status: number | null): void {
  if (!Number.isInteger(obj[key])) bad(`${path}.${key}`, "an integer", status);
}

export function checkDirective(value: unknown, path: string, status: number | null): Directive {
  const d = record(value, path, status);
  if (typeof d["action"] !== "string" || !ACTIONS.has(d["action"])) bad(`${path}.action`, "a directive action", status);
  if (typeof d["may_write"] !== "boolean") bad(`${path}.may_write`, "a boolean", status);
  str(d, "reason", path, status);
  strOrNull(d, "not_before", path, status);
  if (d["input"] !== undefined && !isRecord(d["input"])) bad(`${path}.input`, "an object", status);
  if (d["not_before"] === undefined) d["not_before"] = null;
  return d as unknown as Directive;
}

export function checkStep(value: unknown, path: string, status: number | null): Step {
  const s = record(value, path, status);
  for (const key of ["operation_ref", "tool", "state", "reason", "url"]) str(s, key, path, status);
  int(s, "attempts", path, status);
  int(s, "max_attempts", path, status);
  if (typeof s["held"] !== "boolean") bad(`${path}.held`, "a boolean", status);
  checkDirective(s["directive"], `${path}.directive`, status);
  if (!Array.isArray(s["decisions"])) bad(`${path}.decisions`, "a list", status);
  return s as unknown as Step;
}

export function checkGrant(value: unknown, status: number | null): AttemptGrant {
  const g = record(value, "answer", status);
  int(g, "attempt", "answer", status);
  checkStep(g["step"], "answer.step", status);
  checkDirective(g["directive"], "answer.directive", status);
  return g as unknown as AttemptGrant;
}

export function checkIngest(value: unknown, status: number | null): IngestAnswer {
  const a = record(value, "answer", status);
  int(a, "envelope_id", "answer", status);
  checkStep(a["step"], "answer.step", status);
  checkDirective(a["directive"], "answer.directive", status);
  if (a["dropped_detail_keys"] === undefined) a["dropped_detail_keys"] = [];
  if (!Array.isArray(a["dropped_detail_keys"])) bad("answer.dropped_detail_keys", "a list", status);
  return a as unknown as IngestAnswer;
}

export function checkStepAnswer(value: unknown, status: number | null): StepAnswer {
  const a = record(value, "answer", status);
  checkStep(a["step"], "answer.step", status);
  checkDirective(a["directive"], "answer.directive", status);
  return a as unknown as StepAnswer;
}

export function checkPage(value: unknown, status: number | null): StepPage {
  const p = record(value, "answer", status);
  if (!Array.isArray(p["results"])) bad("answer.results", "a list", status);
  p["results"].forEach((step, i) => checkStep(step, `answer.results[${i}]`, status));
  strOrNull(p, "next", "answer", status);
  return p as unknown as StepPage;
}

export function checkDecisionAnswer(value: unknown, status: number | null): DecisionAnswer {
  const a = record(value, "answer", status);
  const d = record(a["decision"], "answer.decision", status);
  str(d, "action", "answer.decision", status);
  checkStep(a["step"], "answer.step", status);
  return a as unknown as DecisionAnswer;
}

export function checkCodes(value: unknown, status: number | null): CodeList {
  const a = record(value, "answer", status);
  str(a, "tool", "answer", status);
  if (!Array.isArray(a["codes"])) bad("answer.codes", "a list", status);
  return a as unknown as CodeList;
}

export function checkSkipped(value: unknown, status: number | null): Skipped {
  const a = record(value, "answer", status);
  str(a, "run_id", "answer", status);
  if (!Array.isArray(a["skipped"])) bad("answer.skipped", "a list", status);
  return a as unknown as Skipped;
}

export function checkObject(value: unknown, status: number | null): Record<string, unknown> {
  return record(value, "answer", status);
}
