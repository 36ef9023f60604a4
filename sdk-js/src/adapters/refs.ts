import { inputFingerprint } from "../envelopes.js";

/** The default step of an adapter's call: `<runId>/<tool>/<fingerprint prefix>`, so the same
 * call in one run is the same operation (Holdpoint refuses to write it twice). */
export function defaultOperationRef(runId: string, tool: string, input: unknown): string {
  return `${runId}/${tool}/${inputFingerprint(input).slice(0, 24)}`;
}
