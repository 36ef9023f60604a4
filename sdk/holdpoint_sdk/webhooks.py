"""Checking a Holdpoint webhook (Standard Webhooks signatures, contract §5)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import cast

from .errors import WebhookVerificationError
from .types import WebhookEvent

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE = 300  # seconds between the sender's timestamp and this clock


def _secret_bytes(secret: str) -> bytes:
    raw = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as error:
        raise WebhookVerificationError("the webhook secret is not whsec_<base64>") from error


def sign_webhook(secret: str, *, message_id: str, timestamp: int, body: bytes | str) -> str:
    """The `webhook-signature` value Holdpoint sends for this message (`v1,<base64>`)."""
    payload = body.encode("utf-8") if isinstance(body, str) else body
    signed = f"{message_id}.{timestamp}.".encode() + payload
    digest = hmac.new(_secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def verify_webhook(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> WebhookEvent:
    """Check a webhook's signature and timestamp and return its parsed body.

    `payload` is the raw request body, exactly as received (parse it only after this check).
    Raises WebhookVerificationError when a header is missing, the timestamp is further than
    `tolerance` seconds from now (a replay), or no `v1` signature matches."""
    lowered = {key.lower(): value for key, value in headers.items()}
    try:
        message_id = lowered["webhook-id"]
        timestamp_text = lowered["webhook-timestamp"]
        signatures = lowered["webhook-signature"]
    except KeyError as error:
        raise WebhookVerificationError(f"missing header {error.args[0]}") from None
    try:
        timestamp = int(timestamp_text)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not unix seconds") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance")
    expected = sign_webhook(secret, message_id=message_id, timestamp=timestamp, body=payload)
    expected_sig = expected.partition(",")[2]
    for candidate in signatures.split():
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature.encode(), expected_sig.encode()):
            break
    else:
        raise WebhookVerificationError("no signature matches")
    try:
        event = json.loads(payload)
    except ValueError:
        raise WebhookVerificationError("the body is not JSON") from None
    if not isinstance(event, dict) or not {"type", "timestamp", "data"} <= event.keys():
        raise WebhookVerificationError("the body is not a Holdpoint event")
    return cast(WebhookEvent, event)
