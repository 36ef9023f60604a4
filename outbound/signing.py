"""Standard Webhooks signatures (https://www.standardwebhooks.com/, contract §5).

`webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, keyed with the
decoded bytes of the endpoint's `whsec_<base64>` secret."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the standard allows 24..64


class InvalidSecret(ValueError):
    pass


def secret_generate() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_decode(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidSecret("a webhook secret starts with whsec_")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError) as error:
        raise InvalidSecret("a webhook secret is whsec_ and base64") from error
    if not 24 <= len(key) <= 64:
        raise InvalidSecret("a webhook secret holds 24 to 64 bytes")
    return key


def signature(*, secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_decode(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(*, secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one try (the timestamp is the try's own)."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret=secret, message_id=message_id, timestamp=timestamp, body=body),
    }
