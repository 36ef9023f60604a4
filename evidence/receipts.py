"""Decision receipts (contract §13): a compact JWS, EdDSA over Ed25519, with the key's `kid`.

Signed by PyJWT (with `cryptography`): no signing code of our own. The claims are the caller's
(envelopes.services.steps builds them in the one decision path); `receipt_verify` is the
server's own check, used by tests and the export's readers.
"""

from __future__ import annotations

from typing import Any

import jwt

from .keys import jwks, signing_key

CLAIMS = (
    "iss", "team", "operation_ref", "tool", "action", "input_fingerprint", "decided_by", "decided_at", "step_version",
)  # fmt: skip
TYPE = "hp-receipt+jwt"


def receipt_sign(claims: dict[str, Any]) -> str:
    """The compact JWS over `claims` (exactly CLAIMS), signed with the current key."""
    assert set(claims) == set(CLAIMS), f"a receipt carries exactly {CLAIMS}"
    key = signing_key()
    return jwt.encode(claims, key.private, algorithm="EdDSA", headers={"kid": key.kid, "typ": TYPE})


def receipt_verify(receipt: str) -> dict[str, Any]:
    """The claims of a receipt signed by one of this deployment's keys (jwt.InvalidTokenError
    otherwise)."""
    kid = jwt.get_unverified_header(receipt).get("kid")
    for jwk in jwks()["keys"]:
        if jwk["kid"] == kid:
            key = jwt.PyJWK(jwk).key
            return jwt.decode(receipt, key, algorithms=["EdDSA"], options={"verify_aud": False})
    raise jwt.InvalidKeyError(f"no receipt key {kid!r}")
