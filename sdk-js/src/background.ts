/**
 * Success reports posted after the result is returned (`reportSuccess: "after"`, issue 29).
 *
 * The agent needs Holdpoint's answer before a write (the gate) and after a failure (the
 * directive), not after a success, whose directive is always `stop`. So a success's envelope
 * may be posted after the result is handed back. If it is lost (a crash), the step keeps a
 * granted attempt with no report, and the gate sends such a step to verification before any
 * new write (contract §4: `verification_required`): nothing is written twice, at worst one
 * verification is asked. Failures are never queued: their directive matters now.
 *
 * One queue per client, of at most `maxSize` reports, posted in order by one worker loop, each
 * retried under its own Idempotency-Key (a retry of a post that did arrive gets the stored
 * answer). A full queue posts the new report at once: the agent slows down, nothing is
 * dropped. `Holdpoint.close()` flushes; a retry's wait never keeps the process alive.
 */

import type { Directive } from "./types.js";
import { HoldpointUnavailable, ServerError, Throttled, HoldpointError } from "./errors.js";

export type ReportSuccess = "before" | "after";

export const DEFAULT_QUEUE_SIZE = 1000;
/** Between a report's tries, after the client's own retries of each post: about five minutes. */
export const RETRY_DELAYS_MS = [500, 1000, 2000, 5000, 10_000, 30_000, 60_000, 60_000, 60_000, 60_000];
export const FLUSH_TIMEOUT_MS = 10_000;

/** The directive a success's envelope is answered with (contract §4). */
export const SUCCESS_DIRECTIVE: Directive = { action: "stop", may_write: false, not_before: null, reason: "committed" };

export function checkMode(mode: string | undefined): ReportSuccess {
  if (mode === undefined || mode === "before") return "before";
  if (mode === "after") return "after";
  throw new TypeError(`reportSuccess is "before" or "after", not ${JSON.stringify(mode)}`);
}

export interface PendingReport {
  envelope: Record<string, unknown>;
  idempotencyKey: string;
  operationRef: string;
}

const UNDELIVERED = [HoldpointUnavailable, ServerError, Throttled];

function givenUp(report: PendingReport, error: unknown): void {
  const why = error instanceof HoldpointError ? `${error.code}: ${error.message}` : String(error);
  console.error(`holdpoint: the success report of ${report.operationRef} was not delivered (${why}); the step will ask for verification`);
}

export class ReportQueue {
  private readonly queue: PendingReport[] = [];
  private pending = 0;
  private readonly refs = new Map<string, number>();
  private waiters: Array<() => void> = [];
  private running = false;
  private givingUp = false;
  private closed = false;

  constructor(
    private readonly post: (report: PendingReport) => Promise<unknown>,
    private readonly maxSize: number = DEFAULT_QUEUE_SIZE,
    private readonly retryDelaysMs: readonly number[] = RETRY_DELAYS_MS,
  ) {}

  /** Reports queued or being posted. */
  get length(): number {
    return this.pending;
  }

  async submit(report: PendingReport): Promise<void> {
    if (this.closed) throw new Error("the client is closed");
    this.pending += 1;
    this.refs.set(report.operationRef, (this.refs.get(report.operationRef) ?? 0) + 1);
    if (this.queue.length >= this.maxSize) {
      try {
        await this.deliver(report); // bounded: the caller waits, the report is not dropped
      } finally {
        this.done(report);
      }
      return;
    }
    this.queue.push(report);
    if (!this.running) void this.work();
  }

  private async work(): Promise<void> {
    this.running = true;
    try {
      for (let report = this.queue.shift(); report; report = this.queue.shift()) {
        try {
          await this.deliver(report);
        } finally {
          this.done(report);
        }
      }
    } finally {
      this.running = false;
    }
  }

  private done(report: PendingReport): void {
    this.pending -= 1;
    const left = (this.refs.get(report.operationRef) ?? 1) - 1;
    if (left) this.refs.set(report.operationRef, left);
    else this.refs.delete(report.operationRef);
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  private async deliver(report: PendingReport): Promise<void> {
    for (let tryNumber = 0; ; tryNumber++) {
      try {
        await this.post(report);
        return;
      } catch (error) {
        const delay = this.retryDelaysMs[tryNumber];
        if (!UNDELIVERED.some((cls) => error instanceof cls) || delay === undefined || this.givingUp) {
          givenUp(report, error);
          return;
        }
        console.warn(`holdpoint: success report of ${report.operationRef} not delivered yet; retrying in ${delay} ms`);
        await new Promise<void>((resolve) => setTimeout(resolve, delay).unref());
      }
    }
  }

  private until(ready: () => boolean, timeoutMs: number): Promise<boolean> {
    if (ready()) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(ready()), timeoutMs);
      timer.unref();
      const check = (): void => {
        if (ready()) {
          clearTimeout(timer);
          resolve(true);
        } else {
          this.waiters.push(check);
        }
      };
      this.waiters.push(check);
    });
  }

  /** Until no report of this step is queued (before its next gate call). */
  settled(operationRef: string, timeoutMs: number = FLUSH_TIMEOUT_MS): Promise<boolean> {
    return this.until(() => !this.refs.has(operationRef), timeoutMs);
  }

  /** Until every queued report is delivered or given up; false after `timeoutMs`. */
  flush(timeoutMs: number = FLUSH_TIMEOUT_MS): Promise<boolean> {
    return this.until(() => this.pending === 0, timeoutMs);
  }

  async close(timeoutMs: number = FLUSH_TIMEOUT_MS): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (!(await this.flush(timeoutMs))) {
      console.error(`holdpoint: ${this.pending} success report(s) not delivered at close; their steps will verify`);
      this.givingUp = true;
    }
  }
}
