"""What the proxy reports to Holdpoint about one upstream call: the envelope built from its
result, and the failure a timeout, an MCP error, a broken connection or a bare error result
stands for (classified like the SDK's guard: on a tool with side effects the outcome is
`unknown`, to verify; without side effects a retry later or an escalation)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ..client_base import Dialect
from ..envelopes import Failure, now_utc, success_envelope
from ..types import VerificationOutcome
from .calls import ToolCall

logger = logging.getLogger("holdpoint_sdk.mcp_proxy")

# The field under which an envelope that named another step is reported (and refused).
UPSTREAM_NAMED = "step_named_by_upstream"
# A JSON body of the mcp dialect must stay under Holdpoint's 64 KiB: big content is left out.
MAX_REPORTED_CONTENT = 16 * 1024
MAX_REPORTED_RESULT = 16 * 1024
MAX_MESSAGE = 500
MAX_NAMED = 200  # characters of each step field an upstream named wrongly, kept as evidence


def _short(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text_of(result: Mapping[str, Any]) -> str:
    parts = [block.get("text", "") for block in result.get("content") or [] if isinstance(block, Mapping)]
    return " ".join(part for part in parts if isinstance(part, str)).strip()


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError):
        return -1


def looks_like_envelope(value: Any) -> bool:
    """A structuredContent that is a Holdpoint envelope (contract §2), not a plain result."""
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("ok"), bool)
        and "commit_state" in value
        and ("code" in value or value.get("ok") is True)
    )


def result_report(
    call: ToolCall, result: Mapping[str, Any], side_effects: bool
) -> tuple[Failure | None, dict[str, Any], Dialect]:
    """What an upstream result that came back says: (failure, envelope to post, dialect)."""
    structured = result.get("structuredContent")
    if looks_like_envelope(structured):
        return None, mcp_envelope(call, result), "mcp"
    if result.get("isError"):
        failure = bare_error_failure(_text_of(result), side_effects)
        return failure, failure_envelope(call, failure), "canonical"
    reported = structured if structured is not None and 0 <= _json_size(structured) <= MAX_REPORTED_RESULT else None
    envelope = success_envelope(
        tool=call.recorded_tool,
        operation_ref=call.operation_ref,
        occurred_at=now_utc(),
        result=reported,
        attempt=call.attempt,
        run_id=call.run_id,
    )
    return None, envelope, "canonical"


def failure_envelope(call: ToolCall, failure: Failure) -> dict[str, Any]:
    """The canonical envelope of a failed call, about the call's own step."""
    step = call.step
    remaining = (step["max_attempts"] - step["attempts"]) if step else 0
    return failure.envelope(
        tool=call.recorded_tool,
        operation_ref=call.operation_ref,
        attempts_remaining=remaining,
        occurred_at=now_utc(),
        attempt=call.attempt,
        run_id=call.run_id,
    )


def mcp_envelope(call: ToolCall, result: Mapping[str, Any]) -> dict[str, Any]:
    """The upstream's envelope about the call's own step: the step's fields are always the
    call's. One that named another step is reported so that Holdpoint rejects it, and so
    escalates the call's step (`malformed_envelope`) and quarantines what it claimed."""
    inner = dict(result["structuredContent"])
    named = names_another_step(call, inner)
    for key, value in (
        ("tool", call.recorded_tool),
        ("operation_ref", call.operation_ref),
        ("run_id", call.run_id),
        ("attempt", call.attempt),
    ):
        if value is not None:
            inner[key] = value
        else:
            inner.pop(key, None)
    if named:
        logger.warning(
            "the upstream's envelope for %s named another step (%s); reporting it as malformed",
            call.operation_ref,
            ", ".join(sorted(named)),
        )
        # An unknown top-level field: Holdpoint refuses it (contract §2) and names it.
        inner[UPSTREAM_NAMED] = named
    content = result.get("content") or []
    if _json_size(content) < 0 or _json_size(content) > MAX_REPORTED_CONTENT:
        content = []  # content blocks are MCP's business; Holdpoint keeps the envelope
    body: dict[str, Any] = {"content": content, "structuredContent": inner}
    if "isError" in result:
        body["isError"] = bool(result["isError"])
    return body


def names_another_step(call: ToolCall, envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The step fields of the upstream's envelope that are not the call's own (its tool may go
    by the upstream's name or by the one Holdpoint records)."""
    own: dict[str, tuple[Any, ...]] = {
        "tool": (call.tool, call.recorded_tool),
        "operation_ref": (call.operation_ref,),
        "run_id": (call.run_id,),
        "attempt": (call.attempt,),
    }
    return {
        # As JSON text, cut: evidence for the quarantine that cannot push the body over its limit.
        key: _short(json.dumps(envelope[key], ensure_ascii=False, default=repr), MAX_NAMED)
        for key, allowed in own.items()
        if key in envelope and not any(_same(envelope[key], value) for value in allowed)
    }


def _same(value: Any, own: Any) -> bool:
    return type(value) is type(own) and value == own  # strict: True is not attempt 1


def verification_outcome(found: Mapping[str, Any]) -> tuple[VerificationOutcome | None, str | None]:
    """(outcome, evidence_ref) from a verification tool's result: `{"outcome": committed |
    not_found | unavailable, "evidence_ref"?}` or `{"found": bool, "evidence_ref"?}`."""
    if found.get("isError"):
        return "unavailable", None
    data = found.get("structuredContent")
    if not isinstance(data, Mapping):
        return None, None
    evidence = data.get("evidence_ref")
    evidence = evidence if isinstance(evidence, str) and 1 <= len(evidence) <= 200 else None
    outcome = data.get("outcome")
    if outcome == "committed" or outcome == "not_found" or outcome == "unavailable":
        return outcome, evidence
    if isinstance(data.get("found"), bool):
        return ("committed" if data["found"] else "not_found"), evidence
    return None, None


def timeout_failure(timeout: float, side_effects: bool, default_delay: float) -> Failure:
    message = f"the MCP server did not answer within {timeout:g}s"
    if side_effects:
        return Failure.outcome_unknown("UPSTREAM_TIMEOUT", agent_message=message + "; it may have committed")
    not_before = now_utc() + dt.timedelta(seconds=default_delay)
    return Failure.retry_later("UPSTREAM_TIMEOUT", not_before=not_before, category="dependency", agent_message=message)


def mcp_error_failure(error: MCPError, side_effects: bool) -> Failure:
    message = _short(f"MCP error {error.code}: {error.message}")
    if error.code == types.INVALID_PARAMS:
        # Refused before the tool ran: the input is what to fix.
        return Failure.invalid_input("INVALID_PARAMS", field="arguments", agent_message=message)
    if error.code == types.METHOD_NOT_FOUND:
        return Failure.escalate("TOOL_NOT_FOUND", category="validation", agent_message=message)
    if side_effects:
        return Failure.outcome_unknown("UPSTREAM_ERROR", agent_message=message + "; it may have committed")
    return Failure.escalate("UPSTREAM_ERROR", category="dependency", agent_message=message)


def broken_failure(error: BaseException, side_effects: bool) -> Failure:
    message = f"{type(error).__name__}: the connection to the MCP server broke during the call"
    if side_effects:
        return Failure.outcome_unknown("UPSTREAM_DISCONNECTED", agent_message=message + "; it may have committed")
    return Failure.escalate("UPSTREAM_DISCONNECTED", category="dependency", agent_message=message)


def bare_error_failure(text: str, side_effects: bool) -> Failure:
    message = _short("the tool reported an error" + (f": {text}" if text else ""))
    if side_effects:
        return Failure.outcome_unknown("TOOL_ERROR", category="internal", agent_message=message)
    return Failure.escalate("TOOL_ERROR", category="internal", agent_message=message)


__all__ = [
    "UPSTREAM_NAMED",
    "bare_error_failure",
    "broken_failure",
    "failure_envelope",
    "looks_like_envelope",
    "mcp_envelope",
    "mcp_error_failure",
    "names_another_step",
    "result_report",
    "timeout_failure",
    "verification_outcome",
]
