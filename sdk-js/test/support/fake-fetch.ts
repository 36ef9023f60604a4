/** A fetch that records what would have been sent and answers from a script. */
export interface Sent {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: string | undefined;
}

export type Script = (sent: Sent, index: number) => Response | Promise<Response>;

export function fakeFetch(script: Script): { fetch: typeof fetch; sent: Sent[] } {
  const sent: Sent[] = [];
  const fn = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const headers: Record<string, string> = {};
    new Headers(init?.headers).forEach((value, key) => {
      headers[key] = value;
    });
    const record: Sent = { url: String(input), method: init?.method ?? "GET", headers, body: typeof init?.body === "string" ? init.body : undefined };
    sent.push(record);
    return script(record, sent.length - 1);
  };
  return { fetch: fn as typeof fetch, sent };
}

export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  const type = status >= 400 ? "application/problem+json" : "application/json";
  return new Response(status === 304 ? null : JSON.stringify(body), { status, headers: { "Content-Type": type, ...headers } });
}

export function step(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    operation_ref: "op_1",
    tool: "create_invoice",
    state: "in_progress",
    held: false,
    reason: "attempt_granted",
    correlation_id: null,
    run_id: null,
    attempts: 1,
    max_attempts: 3,
    not_before: null,
    deadline: null,
    directive: { action: "proceed", may_write: true, not_before: null, reason: "attempt_granted" },
    last_envelope: null,
    decisions: [],
    proposal: null,
    created_at: "2026-01-01T00:00:00Z",
    updated_at: "2026-01-01T00:00:00Z",
    url: "http://hp.test/steps/1/",
    ...overrides,
  };
}
