/** Against a live Holdpoint: the real server and a worker, started once for this file. */

import { after, before, describe } from "node:test";

import { startDownstream, type Downstream } from "./support/downstream.js";
import { startHoldpoint, type Live } from "./support/server.js";
import { adapterScenarios } from "./live/adapters.js";
import { exampleScenario } from "./live/example.js";
import { reportAfterScenarios } from "./live/report-after.js";
import { seedScenarios } from "./live/seeds.js";

let live: Live | undefined;
let downstream: Downstream | undefined;

const ctx = (): { live: Live; downstream: Downstream } => {
  if (!live || !downstream) throw new Error("Holdpoint did not start");
  return { live, downstream };
};

describe("against a live Holdpoint", { timeout: 170_000 }, () => {
  before(async () => {
    const started = Date.now();
    [live, downstream] = await Promise.all([startHoldpoint(), startDownstream()]);
    console.log(`# Holdpoint up at ${live.url} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }, { timeout: 120_000 });
  after(async () => {
    await Promise.all([live?.stop(), downstream?.close()]);
  });
  seedScenarios(ctx);
  adapterScenarios(ctx);
  exampleScenario(ctx);
  reportAfterScenarios(ctx);
});
