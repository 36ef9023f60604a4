"""What the client receives for a guarded tools/call: the upstream's result (or a stand-in
for one that never came) with Holdpoint's directive added under `holdpoint` in
`structuredContent`, in `_meta["dev.holdpoint/directive"]`, and as one text line a model can
follow. The line is written from the directive alone, never from the tool's text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..envelopes import Failure
from ..types import Directive, Step
from .calls import META_DIRECTIVE, ToolCall


def describe(directive: Mapping[str, Any], step: Mapping[str, Any] | None, operation_ref: str) -> str:
    """One line a model can follow, from the directive alone (never from the tool's text)."""
    action = directive.get("action")
    reason = directive.get("reason") or ""
    url = (step or {}).get("url")
    where = f" at {url}" if url else ""
    if action == "proceed":
        return f"Holdpoint: step {operation_ref} may proceed ({reason})."
    if action == "stop":
        state = (step or {}).get("state")
        if state == "succeeded" or reason in ("committed", "verified_committed", "already_committed"):
            return f"Holdpoint: step {operation_ref} is done (committed); do not call this tool again for it."
        return f"Holdpoint: step {operation_ref} is closed ({reason}); do not call this tool again for it."
    if action == "wait":
        return (
            f"Holdpoint: wait until {directive.get('not_before') or 'later'}, then call again with the same "
            f"input ({reason})."
        )
    if action == "verify":
        return (
            f"Holdpoint: the outcome of step {operation_ref} is unknown; do not call again: it is being "
            f"verified{where} ({reason})."
        )
    if action == "fix_input":
        details = ((step or {}).get("last_envelope") or {}).get("safe_details") or {}
        field = details.get("field")
        blame = f" (field: {field})" if isinstance(field, str) else ""
        return f"Holdpoint: fix the input{blame} and call again; the same input will be refused ({reason})."
    if action == "hold":
        return f"Holdpoint: held for a reviewer{where}; do not call again until it is decided ({reason})."
    return f"Holdpoint: {action} ({reason})."


def _holdpoint_block(
    call: ToolCall, step: Mapping[str, Any] | None, directive: Mapping[str, Any], **more: Any
) -> dict[str, Any]:
    block = {
        "operation_ref": call.operation_ref,
        "run_id": call.run_id,
        "attempt": call.attempt,
        "state": (step or {}).get("state"),
        "step_url": (step or {}).get("url"),
        "directive": dict(directive),
        "input_sent": call.input_sent,
    }
    if call.input_withheld:
        block["input_withheld"] = call.input_withheld
    if call.input_edited:
        # Approved by a reviewer (Holdpoint refuses an edit that carries a secret).
        block["input_edited"] = True
        block["input"] = call.arguments
    if call.client_review is not None:
        # Put to the client's human (decide.py): approved, approval_counted, rejected,
        # not_decided or refused, with the refusal's code.
        block["client_review"] = {"outcome": call.client_review["outcome"], "code": call.client_review["code"]}
    block.update(more)
    return block


def _line(call: ToolCall, step: Mapping[str, Any] | None, directive: Mapping[str, Any]) -> str:
    line = describe(directive, step, call.operation_ref)
    if call.input_edited:
        line += " A reviewer approved an edited input: the tool was called with it, not with yours (see input)."
    if directive.get("action") == "hold" and call.input_withheld:
        line += f" The reviewer sees only the input's fingerprint: {call.input_withheld}."
    if call.client_review is not None:
        line += " " + call.client_review["note"]
    return line


def _decorate(result: dict[str, Any], block: dict[str, Any], line: str, *, closed_schema: bool) -> dict[str, Any]:
    out = dict(result)
    out["content"] = [*(result.get("content") or []), {"type": "text", "text": line}]
    structured = result.get("structuredContent")
    # A closed outputSchema would reject the extra `holdpoint` key, so the block goes in `_meta`
    # only; an error result is not checked against the schema.
    if not closed_schema or result.get("isError"):
        if structured is None:
            out["structuredContent"] = {"holdpoint": block}
        elif isinstance(structured, Mapping) and "holdpoint" not in structured:
            out["structuredContent"] = {**structured, "holdpoint": block}
    meta = dict(result.get("_meta") or {})
    meta[META_DIRECTIVE] = block
    out["_meta"] = meta
    return out


def refused_answer(
    call: ToolCall, code: str, step: Step | None, directive: Mapping[str, Any], *, closed_schema: bool
) -> dict[str, Any]:
    """The answer to a call the gate refused: the upstream was not called."""
    block = _holdpoint_block(call, step, directive, refused=code)
    line = _line(call, step, directive) + " The tool was not called."
    return _decorate({"content": [], "isError": True}, block, line, closed_schema=closed_schema)


def call_answer(
    call: ToolCall,
    result: dict[str, Any] | None,
    failure: Failure | None,
    step: Step | None,
    directive: Directive,
    *,
    reported: bool,
    closed_schema: bool,
) -> dict[str, Any]:
    """The answer to a call the upstream ran (or that broke on the way): its result, or a text
    saying what became of it when none came back."""
    block = _holdpoint_block(call, step, directive, reported=reported)
    line = _line(call, step, directive)
    if not reported:
        line += " (Holdpoint could not be told of this call; its next attempt will ask for verification.)"
    if result is None:
        # No result came back (timeout, MCP error, broken connection).
        assert failure is not None
        committed = step is not None and step["state"] == "succeeded"
        what = failure.agent_message or failure.code
        text = f"The tool call did not answer normally ({what})."
        if committed:
            text += " Holdpoint verified that it committed."
        return _decorate(
            {"content": [{"type": "text", "text": text}], "isError": not committed},
            block,
            line,
            closed_schema=closed_schema,
        )
    return _decorate(result, block, line, closed_schema=closed_schema)


def local_error(text: str) -> dict[str, Any]:
    """An error result the proxy answers on its own, without Holdpoint's directive."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


__all__ = ["call_answer", "describe", "local_error", "refused_answer"]
