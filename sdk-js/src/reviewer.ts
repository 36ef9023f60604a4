/** The reviewer API's client (contract §10), on the shared transport. */

import { InvalidArgument, InvalidResponse } from "./errors.js";
import { checkOperationRef, toJsonValue } from "./envelopes.js";
import { checkDecisionAnswer, checkPage, checkStep } from "./shape.js";
import { Transport, checkBaseUrl, checkKey, nextParams, teamPath, teamStepPath, type ClientOptions, type RequestOptions } from "./transport.js";
import type { DecisionAction, DecisionAnswer, QueueKind, Step, StepPage } from "./types.js";

/** A step as the reviewer read it, with the ETag a decision on that version names. */
export interface ReviewedStep {
  step: Step;
  etag: string;
}

/**
 * The reviewer API (contract §10) with a reviewer token (`hpr_...`, made at /account/tokens/).
 * A decision names the ETag of the step version the reviewer looked at (`If-Match`): if the
 * step changed since, Holdpoint answers 412 (`StepChanged`) and decides nothing. A decision is
 * never sent twice (a lost answer: read the step again).
 */
export class Reviewer {
  readonly baseUrl: string;
  private readonly transport: Transport;

  constructor(baseUrl: string, token: string, options: ClientOptions = {}) {
    this.baseUrl = checkBaseUrl(baseUrl);
    checkKey(token, "hpr_", "a reviewer token", "token");
    this.transport = new Transport(this.baseUrl, token, options);
  }

  async queuePage(team: string, options: { kind?: QueueKind; limit?: number; cursor?: string } & RequestOptions = {}): Promise<StepPage> {
    const answer = await this.transport.send({
      method: "GET",
      path: teamPath(team) + "/queue",
      params: { kind: options.kind ?? "approvals", limit: options.limit, cursor: options.cursor },
      idempotent: true,
      expect: [200],
      signal: options.signal,
    });
    return checkPage(answer.json, answer.status);
  }

  async *queue(team: string, options: { kind?: QueueKind; pageSize?: number } & RequestOptions = {}): AsyncGenerator<Step> {
    let params: Record<string, string | number | undefined> | null = { kind: options.kind ?? "approvals", limit: options.pageSize };
    while (params !== null) {
      const answer = await this.transport.send({ method: "GET", path: teamPath(team) + "/queue", params, idempotent: true, expect: [200], signal: options.signal });
      const page = checkPage(answer.json, answer.status);
      yield* page.results;
      params = nextParams(page.next);
    }
  }

  /** A step of the team (the §4 shape) and its ETag. */
  async step(team: string, operationRef: string, options: RequestOptions = {}): Promise<ReviewedStep> {
    checkOperationRef(operationRef);
    const answer = await this.transport.send({ method: "GET", path: teamStepPath(team, operationRef), idempotent: true, expect: [200], signal: options.signal });
    const step = checkStep(answer.json, "answer", answer.status);
    const etag = answer.headers.get("ETag");
    if (!etag) throw new InvalidResponse("the reviewer API's step came without an ETag", { code: "invalid_response", status: answer.status, missing: "ETag" });
    return { step, etag };
  }

  /** Decide on the step version `etag` names; `input`: an edited input, for `approve`.
   * Throws StepChanged (412), Unauthorized/RoleRequired (401/403), NotFound,
   * DecisionNotAllowed (409), ValidationFailed (422, e.g. a missing reason). */
  async decide(
    team: string,
    operationRef: string,
    options: { action: DecisionAction; etag: string; reason?: string; input?: Record<string, unknown> } & RequestOptions,
  ): Promise<DecisionAnswer> {
    checkOperationRef(operationRef);
    if (typeof options.etag !== "string" || !options.etag) throw new InvalidArgument("etag is the step's ETag, as read", "etag");
    const body: Record<string, unknown> = { action: options.action };
    if (options.reason !== undefined) body["reason"] = options.reason;
    if (options.input !== undefined) body["input"] = toJsonValue(options.input, "input");
    const answer = await this.transport.send({
      method: "POST",
      path: teamStepPath(team, operationRef) + "/decisions",
      body,
      headers: { "If-Match": options.etag },
      idempotent: false, // a decision sent twice would be refused 412 at best: never resend
      expect: [201],
      signal: options.signal,
    });
    return checkDecisionAnswer(answer.json, answer.status);
  }
}
