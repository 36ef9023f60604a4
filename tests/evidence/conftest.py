"""Receipt fixtures: a known signing seed, and the independent oracle that checks a receipt."""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tests.approvals import conftest as dashboard

# The dashboard's reviewers and held steps (pytest registers the fixtures a conftest holds).
reviewer = dashboard.reviewer
awaiting = dashboard.awaiting

SEED = bytes(range(32))
SEED_B64 = base64.b64encode(SEED).decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def oracle_claims(receipt: str, jwks: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The receipt's header and claims, its Ed25519 signature checked by `cryptography` alone
    over the JWS signing input (RFC 7515 §5.2), not by the library that signed it."""
    head, payload, signature = receipt.split(".")
    header = json.loads(b64url_decode(head))
    keys = {key["kid"]: key for key in jwks["keys"]}
    key = keys[header["kid"]]
    assert (key["kty"], key["crv"]) == ("OKP", "Ed25519")
    Ed25519PublicKey.from_public_bytes(b64url_decode(key["x"])).verify(
        b64url_decode(signature), f"{head}.{payload}".encode()
    )
    return header, json.loads(b64url_decode(payload))
