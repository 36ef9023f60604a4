"""The three dialects of one envelope (contract section 2, Dialects): canonical, compact, mcp.

The compact shape becomes a canonical error envelope and the MCP wrapper gives up the canonical
envelope it carries, so the consistency rules and the parse read one shape. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from envelopes.contract import COMPACT_CATEGORIES, DIALECTS

from .validation import EnvelopeRejected, FieldError, canonical_shape_errors, mcp_wrapper_shape_errors


@dataclass(frozen=True)
class ToolContext:
    """What the compact dialect and the safe_details allowlist need from the tool and the step."""

    max_attempts: int = 3
    side_effects: bool = True
    attempts_so_far: int = 0
    safe_detail_keys: frozenset[str] = frozenset()
    default_backoff_ms: int = 1000


def dialect_from_content_type(content_type: str) -> str:
    """`application/json; profile="compact"` -> `compact`; no profile -> `canonical`. The media
    type itself is the request parser's business (415), not this function's."""
    profile: str | None = None
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "profile":
            profile = value.strip().strip('"').strip().lower()
    if profile is None:
        return "canonical"
    if profile in DIALECTS:
        return profile
    raise EnvelopeRejected(
        "schema_invalid",
        (FieldError("Content-Type", "enum", DIALECTS),),
        detail=f"Unknown envelope profile; expected one of {', '.join(DIALECTS)}.",
    )


def unwrap_mcp(payload: Any) -> tuple[dict[str, Any], list[FieldError]]:
    """The canonical envelope in `structuredContent`, and the shape errors of wrapper and envelope."""
    errors = mcp_wrapper_shape_errors(payload)
    inner = payload.get("structuredContent") if isinstance(payload, dict) else None
    if isinstance(inner, dict):
        errors += canonical_shape_errors(inner)
        return inner, errors
    return {}, errors


def mcp_contradictions(payload: Mapping[str, Any], envelope: Mapping[str, Any]) -> tuple[list[FieldError], list[str]]:
    """What the wrapper contradicts in the envelope it carries."""
    if payload.get("isError", False) is envelope["ok"]:
        return [FieldError("isError", "mismatch")], ["isError must be the opposite of structuredContent.ok"]
    return [], []


def normalise_compact(body: Mapping[str, Any], context: ToolContext, received_at: datetime) -> dict[str, Any]:
    """The compact shape as a canonical error envelope (contract section 2, Dialects)."""
    if body["retryable"]:
        delay_ms = body.get("retry_after_ms", context.default_backoff_ms)
        retry = {
            "directive": "after_delay",
            "not_before": received_at + timedelta(milliseconds=delay_ms),
            "max_attempts_remaining": max(0, context.max_attempts - context.attempts_so_far),
        }
        next_action, default_commit_state = "wait_and_retry", "not_committed"
    else:
        retry = {"directive": "never", "max_attempts_remaining": 0}
        next_action = "escalate"
        default_commit_state = "unknown" if context.side_effects else "not_committed"
    envelope = {
        "ok": False,
        "code": body["code"],
        "category": COMPACT_CATEGORIES[body["category"]],
        "commit_state": body.get("commit_state", default_commit_state),
        "retry": retry,
        "next_action": next_action,
        "occurred_at": received_at,
    }
    for name in ("tool", "operation_ref", "correlation_id", "run_id", "scope", "resource_id"):
        if name in body:
            envelope[name] = body[name]
    return envelope


# In the compact dialect the retry fields and next_action all come from `retryable`.
_FROM_RETRYABLE = {
    "retry.directive",
    "retry.not_before",
    "retry.max_attempts_remaining",
    "next_action",
}


def as_compact_fields(errors: list[FieldError]) -> list[FieldError]:
    """Errors of a normalised compact envelope, named by the compact field the sender wrote."""
    return [FieldError("retryable" if e.field in _FROM_RETRYABLE else e.field, e.rule) for e in errors]
