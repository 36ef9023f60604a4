"""Checking an approval's receipt before running what it approved (contract §13).

A decision's `receipt` is a compact JWS (EdDSA, Ed25519, with `kid`) that Holdpoint signed over
{iss, team, operation_ref, tool, action, input_fingerprint, decided_by, decided_at,
step_version}. Before a guard (or holdpoint-mcp) runs an input that a step's latest approval
names, it checks that approval's receipt against the server's keys: the signature, and that it
is for this step, this tool, an approval, and this input. A response altered on its way (a
proxy that grants what nobody approved, swaps in another step's receipt, or drops it) is
refused with ReceiptInvalid, before the call.

The keys (GET /.well-known/holdpoint/jwks.json) are fetched once per process and server, and
again when a receipt names a kid the set does not have (a rotation), at most once per
REFRESH_AFTER (a forged kid costs the server one read of a cacheable page, not one per call).
Verification is PyJWT's (with `cryptography`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jwt

from .errors import ReceiptInvalid

JWKS_PATH = "/.well-known/holdpoint/jwks.json"
REFRESH_AFTER = 5.0  # seconds between two fetches for an unknown kid

_lock = threading.Lock()
_keys: dict[str, dict[str, Any]] = {}  # base URL -> kid -> JWK
_fetched_at: dict[str, float] = {}


def approval_acted_on(step: Mapping[str, Any], fingerprint: str) -> Mapping[str, Any] | None:
    """The approval this input runs under: the step's latest approval, when it names this
    input (or no input: a step without a fingerprinted attempt). None: nothing approved it."""
    for decision in reversed(step.get("decisions") or []):
        if isinstance(decision, Mapping) and decision.get("action") == "approve":
            return decision if decision.get("input_fingerprint") in (None, fingerprint) else None
    return None


def forget_keys() -> None:
    """Forget every server's keys (tests; a process that must re-read them)."""
    with _lock:
        _keys.clear()
        _fetched_at.clear()


def _known(base_url: str, kid: str) -> dict[str, Any] | None:
    return _keys.get(base_url, {}).get(kid)


def _should_fetch(base_url: str) -> bool:
    at = _fetched_at.get(base_url)
    return at is None or time.monotonic() - at >= REFRESH_AFTER


def _store(base_url: str, jwks: Any) -> None:
    keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
    found = {
        key["kid"]: dict(key)
        for key in keys or []
        if isinstance(key, Mapping) and isinstance(key.get("kid"), str) and key.get("kty") == "OKP"
    }
    with _lock:
        _keys[base_url] = found
        _fetched_at[base_url] = time.monotonic()


def _kid_of(receipt: str) -> str | None:
    try:
        header = jwt.get_unverified_header(receipt)
    except jwt.PyJWTError:
        return None
    kid = header.get("kid")
    return kid if isinstance(kid, str) and header.get("alg") == "EdDSA" else None


def decided_by(decision: Mapping[str, Any]) -> Any:
    """Who the decision shape says decided, as a receipt names them: "rule:<name>@v<n>",
    "grant:<id>" or the reviewer's username (contract §4's `decided_by`, else `reviewer`)."""
    by = decision.get("decided_by")
    if isinstance(by, Mapping):
        rule, grant = by.get("rule"), by.get("grant")
        if by.get("kind") == "rule" and isinstance(rule, Mapping):
            return f"rule:{rule.get('name')}@v{rule.get('version')}"
        if by.get("kind") == "grant" and isinstance(grant, Mapping):
            return f"grant:{grant.get('id')}"
        return by.get("reviewer")
    return by if isinstance(by, str) else decision.get("reviewer")


def _problem(
    receipt: str, jwk: Mapping[str, Any] | None, *, step: Mapping[str, Any], decision: Mapping[str, Any],
    operation_ref: str, tool: str, fingerprint: str,
) -> str | None:  # fmt: skip
    """What is wrong with the receipt (None: it is the approval of this input on this step)."""
    if jwk is None:
        return "is not signed by any of Holdpoint's keys"
    try:
        claims = jwt.decode(receipt, jwt.PyJWK(dict(jwk)).key, algorithms=["EdDSA"], options={"verify_aud": False})
    except jwt.PyJWTError:
        return "does not verify (its signature or content was altered)"
    expected = {
        "operation_ref": operation_ref,
        "tool": tool,
        "action": "approve",
        "input_fingerprint": decision.get("input_fingerprint"),
        "decided_at": decision.get("decided_at"),
        "decided_by": decided_by(decision),
    }
    for claim, value in expected.items():
        if claims.get(claim) != value:
            return f"is for another {claim.replace('_', ' ')} ({claims.get(claim)!r}, not {value!r})"
    # The issuer is the server whose step page the step names (its HOLDPOINT_BASE_URL).
    iss, url = claims.get("iss"), step.get("url")
    if not isinstance(iss, str) or not isinstance(url, str) or not url.startswith(iss.rstrip("/") + "/steps/"):
        return f"is from another issuer ({iss!r}, the step is at {url!r})"
    if claims["input_fingerprint"] not in (None, fingerprint):
        return f"approves another input ({claims['input_fingerprint']!r})"
    if not isinstance(claims.get("step_version"), int):
        return "names no step version"
    return None


def _refusal(operation_ref: str, problem: str) -> ReceiptInvalid:
    return ReceiptInvalid(
        f"the approval of step {operation_ref!r} {problem}; the call was not made", operation_ref=operation_ref
    )


def _receipt_of(decision: Mapping[str, Any], operation_ref: str) -> str:
    receipt = decision.get("receipt")
    if not isinstance(receipt, str) or not receipt:
        raise _refusal(operation_ref, "carries no receipt")
    return receipt


def check_approval(
    step: Mapping[str, Any], *, base_url: str, operation_ref: str, tool: str, fingerprint: str,
    fetch: Callable[[], Any],
) -> None:  # fmt: skip
    """Raise ReceiptInvalid unless the approval this input runs under (if any) has a receipt
    that verifies and names it. `fetch()` reads the server's JWKS."""
    decision = approval_acted_on(step, fingerprint)
    if decision is None:
        return
    receipt = _receipt_of(decision, operation_ref)
    kid = _kid_of(receipt)
    jwk = _known(base_url, kid) if kid else None
    if kid and jwk is None and _should_fetch(base_url):
        _store(base_url, fetch())
        jwk = _known(base_url, kid)
    problem = _problem(
        receipt, jwk, step=step, decision=decision, operation_ref=operation_ref, tool=tool, fingerprint=fingerprint
    )
    if problem is not None:
        raise _refusal(operation_ref, problem)


async def check_approval_async(
    step: Mapping[str, Any], *, base_url: str, operation_ref: str, tool: str, fingerprint: str,
    fetch: Callable[[], Awaitable[Any]],
) -> None:  # fmt: skip
    """`check_approval` for asyncio clients."""
    decision = approval_acted_on(step, fingerprint)
    if decision is None:
        return
    receipt = _receipt_of(decision, operation_ref)
    kid = _kid_of(receipt)
    jwk = _known(base_url, kid) if kid else None
    if kid and jwk is None and _should_fetch(base_url):
        _store(base_url, await fetch())
        jwk = _known(base_url, kid)
    problem = _problem(
        receipt, jwk, step=step, decision=decision, operation_ref=operation_ref, tool=tool, fingerprint=fingerprint
    )
    if problem is not None:
        raise _refusal(operation_ref, problem)
