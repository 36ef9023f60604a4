"""The receipt signing key: HOLDPOINT_RECEIPT_KEY, or one generated at first use and stored.

`signing_key()` is what a decision signs with; `jwks()` the public keys of every key ever used
(RFC 8037 OKP); `key_rotate()` adds a generated key, which signs from then on. A process keeps
the key it read for KEY_TTL, so a decision costs no query for it; after a rotation the other
processes sign with the new key within that time (receipts of the old one still verify).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import time
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.db.models import Max

from .models import ReceiptKey

KEY_TTL = 60.0  # seconds a process signs with the key it read before reading it again


class RotationRefused(Exception):
    """HOLDPOINT_RECEIPT_KEY is set: that key signs, so a generated one would never be used."""


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: Ed25519PrivateKey

    def __repr__(self) -> str:  # never the private key, in a log or a traceback
        return f"SigningKey(kid={self.kid!r})"


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _public_x(private: Ed25519PrivateKey) -> str:
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _b64url(raw)


def thumbprint(x: str) -> str:
    """The RFC 7638 thumbprint of an Ed25519 public key: the kid."""
    members = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": x}, separators=(",", ":"), sort_keys=True)
    return _b64url(hashlib.sha256(members.encode()).digest())


def _seed_of(private: Ed25519PrivateKey) -> bytes:
    return private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def environment_seed() -> bytes | None:
    """The 32-byte seed HOLDPOINT_RECEIPT_KEY holds (standard or URL-safe base64), or None."""
    text = (settings.HOLDPOINT_RECEIPT_KEY or "").strip()
    if not text:
        return None
    try:
        raw = base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        # Never the value itself in the message: it is a private key.
        raise ImproperlyConfigured("HOLDPOINT_RECEIPT_KEY must be the base64 of a 32-byte Ed25519 seed.")
    return raw


_lock = threading.Lock()
_cached: tuple[float, SigningKey] | None = None


def signing_key() -> SigningKey:
    """The key receipts are signed with now (read at most once per KEY_TTL per process)."""
    global _cached
    cached = _cached
    if cached is not None and time.monotonic() - cached[0] < KEY_TTL:
        return cached[1]
    with _lock:
        key = _load()
        _cached = (time.monotonic(), key)
    return key


def forget_signing_key() -> None:
    """Read the key again at the next signature (after a rotation in this process, in tests)."""
    global _cached
    _cached = None


def _load() -> SigningKey:
    seed = environment_seed()
    if seed is not None:
        private = Ed25519PrivateKey.from_private_bytes(seed)
        x = _public_x(private)
        kid = thumbprint(x)
        # Listed in the JWKS (public part only), so that its receipts verify after it is replaced.
        if not ReceiptKey.objects.filter(kid=kid).exists():
            try:
                with transaction.atomic():
                    ReceiptKey.objects.create(kid=kid, x=x)
            except IntegrityError:
                pass  # listed by a concurrent first use
        return SigningKey(kid=kid, private=private)
    stored = ReceiptKey.objects.filter(generation__isnull=False).order_by("-generation").first()
    if stored is None:
        stored = _generate(generation=1) or ReceiptKey.objects.filter(generation__isnull=False).order_by(
            "-generation"
        ).first()
    assert stored is not None
    private = Ed25519PrivateKey.from_private_bytes(base64.b64decode(stored.seed))
    return SigningKey(kid=stored.kid, private=private)


def _generate(*, generation: int) -> ReceiptKey | None:
    """A new key of that generation; None when a concurrent call made that generation first
    (generation is unique: concurrent first uses make one key, not two)."""
    private = Ed25519PrivateKey.generate()
    x = _public_x(private)
    try:
        with transaction.atomic():
            return ReceiptKey.objects.create(
                kid=thumbprint(x), x=x, seed=base64.b64encode(_seed_of(private)).decode(), generation=generation
            )
    except IntegrityError:
        return None


def key_rotate() -> ReceiptKey:
    """Add a generated key, which signs from now on; every older key stays listed."""
    if environment_seed() is not None:
        raise RotationRefused(
            "HOLDPOINT_RECEIPT_KEY is set, and that key signs: to rotate, set it to a new seed "
            "(the old key stays listed in the JWKS, so its receipts still verify)."
        )
    for _ in range(5):
        last = ReceiptKey.objects.aggregate(last=Max("generation"))["last"] or 0
        made = _generate(generation=last + 1)
        if made is not None:
            forget_signing_key()
            return made
    raise RuntimeError("could not add a receipt key: other rotations kept taking its generation")


def jwks() -> dict[str, list[dict[str, str]]]:
    """Every key's public part (RFC 8037), newest first; the signing key is always among them."""
    signing_key()
    rows = ReceiptKey.objects.order_by("-created_at", "-id").values_list("kid", "x")
    return {
        "keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig"} for kid, x in rows]
    }
