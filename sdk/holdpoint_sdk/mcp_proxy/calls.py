"""One client tools/call as the proxy carries it from the gate to the report, and the `_meta`
keys under which the proxy speaks to the upstream and the client."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..types import Step

META = "dev.holdpoint/"
META_OPERATION_REF = META + "operation_ref"
META_RUN_ID = META + "run_id"
META_ATTEMPT = META + "attempt"
META_APPROVED = META + "approved"
META_DIRECTIVE = META + "directive"

# How this tools/call may put a form to its MCP client (elicitation/create, form mode):
# `ask(message, requested_schema, timeout)` gives the client's ElicitResult as a dict, or None
# when it gave none (an error, no answer in time). Set by the lane or the SDK's handler for each
# call, None when the client did not declare form elicitation.
Ask = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any] | None]]
CLIENT_ASK: ContextVar[Ask | None] = ContextVar("holdpoint_mcp_client_ask", default=None)


@dataclass
class ToolCall:
    """One client tools/call, as the proxy carries it from gate to report."""

    tool: str  # the upstream's name, which it is called by
    recorded_tool: str  # the name Holdpoint records (names.py): the gate's and the envelopes'
    arguments: dict[str, Any]
    client_meta: dict[str, Any]
    operation_ref: str
    run_id: str
    fingerprint: str
    input_size: int  # bytes of the input's canonical JSON (the gate takes up to MAX_INPUT_BYTES)
    attempt: int | None = None
    step: Step | None = None
    approved: bool = False
    input_sent: bool = False  # the gate received the input itself, not only its fingerprint
    input_withheld: str | None = None  # why it did not, when the proxy meant to send it
    input_edited: bool = False  # a reviewer approved an edited input: `arguments` is theirs
    asked_client: bool = False  # the hold was put to the client once (one form per tools/call)
    client_review: dict[str, Any] | None = None  # what became of it: outcome, code, note
    spent: dict[str, float] = field(default_factory=dict)  # ms waiting for gate, upstream, envelope


@contextmanager
def time_spent(call: ToolCall, what: str) -> Iterator[None]:
    """Add the block's wall time to `call.spent[what]`, for the timing log line."""
    started = time.perf_counter()
    try:
        yield
    finally:
        call.spent[what] = call.spent.get(what, 0.0) + (time.perf_counter() - started) * 1000


__all__ = [
    "CLIENT_ASK",
    "META",
    "META_APPROVED",
    "META_ATTEMPT",
    "META_DIRECTIVE",
    "META_OPERATION_REF",
    "META_RUN_ID",
    "Ask",
    "ToolCall",
    "time_spent",
]
