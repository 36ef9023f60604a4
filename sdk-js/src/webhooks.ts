/**
 * Checking a Holdpoint webhook (Standard Webhooks signatures, contract §5), with the
 * `standardwebhooks` package: the `webhook-id`, `webhook-timestamp` (within five minutes of this
 * clock) and `webhook-signature` (`v1,<base64 HMAC-SHA256>` keyed with the `whsec_` secret).
 */

import { Webhook, WebhookVerificationError as LibraryError } from "standardwebhooks";

import { WebhookVerificationError, isRecord } from "./errors.js";
import type { WebhookEvent } from "./types.js";

export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

function lowered(headers: WebhookHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  if (typeof (headers as Headers).forEach === "function" && typeof (headers as Headers).get === "function") {
    (headers as Headers).forEach((value, key) => {
      out[key.toLowerCase()] = value;
    });
    return out;
  }
  for (const [key, value] of Object.entries(headers as Record<string, unknown>)) {
    if (typeof value === "string") out[key.toLowerCase()] = value;
    else if (Array.isArray(value) && typeof value[0] === "string") out[key.toLowerCase()] = value.join(" ");
  }
  return out;
}

/**
 * Check a webhook's signature and timestamp and return its parsed body. `payload` is the raw
 * request body exactly as received (parse it only after this check). Throws
 * `WebhookVerificationError` when a header is missing, the timestamp is outside the tolerance
 * (a replay), no `v1` signature matches, or the body is not a Holdpoint event.
 */
export function verifyWebhook(payload: string | Buffer, headers: WebhookHeaders, secret: string): WebhookEvent {
  const h = lowered(headers);
  for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
    if (!h[name]) throw new WebhookVerificationError(`missing header ${name}`);
  }
  let event: unknown;
  try {
    event = new Webhook(secret).verify(payload, h);
  } catch (error) {
    if (error instanceof LibraryError) throw new WebhookVerificationError(error.message);
    throw new WebhookVerificationError(`the webhook could not be checked: ${(error as Error).message}`);
  }
  if (!isRecord(event) || typeof event["type"] !== "string" || typeof event["timestamp"] !== "string" || !isRecord(event["data"])) {
    throw new WebhookVerificationError("the body is not a Holdpoint event");
  }
  return event as unknown as WebhookEvent;
}

/** The `webhook-signature` value Holdpoint sends for this message (`v1,<base64>`), for tests. */
export function signWebhook(secret: string, messageId: string, timestamp: Date, body: string): string {
  return new Webhook(secret).sign(messageId, timestamp, body);
}
