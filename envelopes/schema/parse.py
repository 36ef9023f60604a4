"""One envelope in, one `ParsedEnvelope` out: shape, times, consistency, then the untrusted text
sanitised as it may be stored (contract section 2). Pure Python, no Django, no database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from hashlib import sha256
from typing import Any

from envelopes.contract import DEFAULT_SAFE_DETAIL_KEYS, DIALECTS
from envelopes.redaction import looks_like_instruction, redact_json

from .consistency import contradictions, time_errors
from .dialects import ToolContext, as_compact_fields, mcp_contradictions, normalise_compact, unwrap_mcp
from .validation import (
    EnvelopeRejected,
    FieldError,
    as_datetime,
    canonical_shape_errors,
    compact_shape_errors,
    identify,
)


@dataclass(frozen=True)
class ParsedEnvelope:
    dialect: str
    ok: bool
    tool: str
    operation_ref: str
    correlation_id: str | None
    run_id: str | None
    attempt: int | None
    occurred_at: datetime
    code: str | None
    category: str | None
    commit_state: str
    retry_directive: str | None
    not_before: datetime | None
    max_attempts_remaining: int | None
    next_action: str | None
    scope: str | None
    resource_id: str | None
    safe_details: dict[str, str | int | float | bool] = field(default_factory=dict)
    dropped_detail_keys: tuple[str, ...] = ()
    agent_message: str = ""
    user_message: str = ""
    verification: dict[str, str | None] | None = None
    result_sha256: str | None = None
    result_size: int | None = None
    flags: frozenset[str] = frozenset()
    redaction_kinds: tuple[str, ...] = ()


def parse_envelope(payload: Any, *, dialect: str, context: ToolContext, received_at: datetime) -> ParsedEnvelope:
    """Validate, normalise and sanitise one envelope; raise `EnvelopeRejected` if it breaks the
    contract (shape errors win over contradictions)."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    if received_at.tzinfo is None:
        raise ValueError("received_at must be timezone-aware")
    tool, operation_ref = identify(payload, dialect)

    def reject(code: str, errors: list[FieldError], detail: str | None = None) -> EnvelopeRejected:
        ordered = sorted(set(errors), key=lambda e: (e.field, e.rule))
        return EnvelopeRejected(code, ordered, tool=tool, operation_ref=operation_ref, detail=detail)

    if dialect == "mcp":
        envelope, errors = unwrap_mcp(payload)
    elif dialect == "compact":
        errors = compact_shape_errors(payload)
        envelope = normalise_compact(payload, context, received_at) if not errors else {}
    else:
        envelope, errors = payload, canonical_shape_errors(payload)
    if not errors:
        errors, reasons = time_errors(envelope, received_at)
        if errors:
            raise reject("schema_invalid", errors, f"A time of the envelope is out of bounds: {'; '.join(reasons)}.")
    result: bytes | None = None
    if not errors and "result" in envelope:
        try:
            result = _canonical_json(envelope["result"])
        except (RecursionError, TypeError, ValueError):
            errors = [FieldError("result", "maxDepth")]
    if errors:
        raise reject("schema_invalid", errors)

    broken, reasons = contradictions(envelope)
    subject = "The envelope"
    if dialect == "compact":
        broken = as_compact_fields(broken)
        subject = "The compact envelope, once normalised,"
    if dialect == "mcp":
        mismatch, why = mcp_contradictions(payload, envelope)
        broken, reasons = broken + mismatch, reasons + why
    if broken:
        detail = f"{subject} contradicts itself: {'; '.join(reasons)}."
        raise reject("contradictory_envelope", broken, detail)
    return _build(envelope, dialect, context, received_at, result)


def _canonical_json(value: Any) -> bytes:
    # Lone surrogates (legal in a JSON string escape, not in UTF-8) pass through rather than fail.
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


# Texts in which `_sanitised` found nothing to redact, with what it answered: an agent sends the
# same few messages and detail values over and over (one per error code and field), and redacting
# one costs ~20 microseconds whatever its length, since every rule's finder looks at it. A text
# that held a secret is never kept, so that no secret outlives its request here. Bounded: at most
# this many texts of at most MAX_LENGTH characters (a few MB at worst), emptied when full.
_CLEAN_TEXTS: dict[str, tuple[str, bool]] = {}
_CLEAN_TEXTS_MAX = 512
_CLEAN_TEXT_MAX_LENGTH = 1000


def _sanitised(text: str) -> tuple[str, tuple[str, ...], bool]:
    """Untrusted text as it may be stored, the secret kinds found in it, and whether it reads
    like an instruction. A pure function of `text`, so a text found clean is answered from
    `_CLEAN_TEXTS` next time."""
    known = _CLEAN_TEXTS.get(text)
    if known is not None:
        return known[0], (), known[1]
    storable = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be stored
    instruction = looks_like_instruction(storable)
    # As a JSON value: a message that holds JSON, or JSON escapes (`postgres:\\/\\/…`), is
    # redacted as what a reader decodes.
    redacted, found = redact_json(storable)
    if not found and len(text) <= _CLEAN_TEXT_MAX_LENGTH:
        if len(_CLEAN_TEXTS) >= _CLEAN_TEXTS_MAX:
            _CLEAN_TEXTS.clear()
        _CLEAN_TEXTS[text] = (str(redacted), instruction)
    return str(redacted), found, instruction


def _build(
    envelope: Mapping[str, Any],
    dialect: str,
    context: ToolContext,
    received_at: datetime,
    result: bytes | None,
) -> ParsedEnvelope:
    kinds: set[str] = set()
    suspicious: list[bool] = []

    def clean(text: str) -> str:
        stored, found, instruction = _sanitised(text)
        suspicious.append(instruction)
        kinds.update(found)
        return stored

    safe_details: dict[str, str | int | float | bool] = {}
    dropped: list[str] = []
    allowlist = DEFAULT_SAFE_DETAIL_KEYS | context.safe_detail_keys
    for key, value in envelope.get("safe_details", {}).items():
        if key in allowlist:
            safe_details[key] = clean(value) if isinstance(value, str) else value
        else:  # never stored, but a name can hold a secret too, and it is echoed back
            suspicious.append(isinstance(value, str) and looks_like_instruction(value))
            dropped.append(clean(key))
    verification = envelope.get("verification")
    if verification is not None:
        evidence_ref = verification.get("evidence_ref")
        verification = {
            "checked_at": as_datetime(verification["checked_at"]).isoformat(),
            "evidence_ref": clean(evidence_ref) if evidence_ref is not None else None,
        }
    ok, retry = envelope["ok"], envelope.get("retry", {})
    attempt, resource_id = envelope.get("attempt"), envelope.get("resource_id")
    remaining, not_before = retry.get("max_attempts_remaining"), retry.get("not_before")
    agent_message = clean(envelope.get("agent_message", ""))
    user_message = clean(envelope.get("user_message", ""))
    resource_id = clean(resource_id) if resource_id is not None else None
    flags = {"redacted"} if kinds else set()
    return ParsedEnvelope(
        dialect=dialect,
        ok=ok,
        tool=envelope["tool"],
        operation_ref=envelope["operation_ref"],
        correlation_id=envelope.get("correlation_id"),
        run_id=envelope.get("run_id"),
        attempt=int(attempt) if attempt is not None else None,
        occurred_at=as_datetime(envelope.get("occurred_at", received_at)),
        code=envelope.get("code"),
        category=envelope.get("category"),
        commit_state=envelope["commit_state"],
        retry_directive=retry.get("directive"),
        not_before=as_datetime(not_before) if not_before is not None else None,
        max_attempts_remaining=int(remaining) if remaining is not None else None,
        next_action=envelope.get("next_action"),
        scope=None if ok else envelope.get("scope", "request"),
        resource_id=resource_id,
        safe_details=safe_details,
        dropped_detail_keys=tuple(sorted(dropped)),
        agent_message=agent_message,
        user_message=user_message,
        verification=verification,
        result_sha256=sha256(result).hexdigest() if result is not None else None,
        result_size=len(result) if result is not None else None,
        flags=frozenset(flags | {"suspicious_text"} if any(suspicious) else flags),
        redaction_kinds=tuple(sorted(kinds)),
    )
