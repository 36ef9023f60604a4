/** examples/agent.ts, built as `npm run example` builds it, run against the live server. */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";

import type { Live } from "../support/server.js";

const run = promisify(execFile);

export function exampleScenario(ctx: () => { live: Live }): void {
  describe("examples/agent.ts", () => {
    it("plays every scenario against the server and exits 0", async () => {
      const { live } = ctx();
      const sdk = join(live.root, "sdk-js");
      const { stdout } = await run(process.execPath, [join(sdk, "build", "example", "examples", "agent.js"), "--run-id", "example-run"], {
        cwd: sdk,
        env: { ...process.env, HOLDPOINT_URL: live.url, HOLDPOINT_API_KEY: live.apiKey },
        timeout: 60_000,
      });
      for (const scenario of ["invalid_input", "rate_limit", "unknown_outcome", "approval", "outage"]) assert.match(stdout, new RegExp(`^${scenario}:`, "m"));
      assert.match(stdout, /a reviewer decides at http:\/\/127\.0\.0\.1:\d+\//);
      assert.match(stdout, /every directive was the one the contract promises/);
    });
    it("refuses a missing key before anything is sent", async () => {
      const { live } = ctx();
      const sdk = join(live.root, "sdk-js");
      const failed = await run(process.execPath, [join(sdk, "build", "example", "examples", "agent.js")], { cwd: sdk, env: { ...process.env, HOLDPOINT_URL: live.url, HOLDPOINT_API_KEY: "" } }).catch((e: unknown) => e as { code: number; stderr: string });
      assert.equal((failed as { code: number }).code, 2);
      assert.match((failed as { stderr: string }).stderr, /an API key \(hp_\.\.\.\) is required/);
    });
  });
}
