"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header parsed, and
the one the current request carries.

A header that breaks the rules is ignored, never an error: a request is answered as if it had
none (the caller's tracing is its own business, and a typo there must not fail its writes).
"""

from __future__ import annotations

import re
from contextvars import ContextVar, Token
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

# version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex only (§3.2.2). A version
# above 00 may append fields after a "-" (§3.3: parse what this version knows, ignore the rest).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
# tracestate: at most 32 list members of at most 256 characters each (§3.3.1); one we cannot
# pass on is dropped, the traceparent kept (§3.3.1.1: a vendor's state is not ours to repair).
_TRACESTATE_MAX = 512
_TRACESTATE_MEMBER = re.compile(
    r"([a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=([\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e])"
)


@dataclass(frozen=True)
class TraceParent:
    """The caller's span: its trace, its own id (the parent of ours), its flags (01: sampled)."""

    trace_id: str  # 32 lowercase hex digits, not all zero
    parent_id: str  # 16 lowercase hex digits, not all zero
    flags: int
    tracestate: str = ""  # as received, when it is well formed; else ""

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.parent_id}-{self.flags:02x}"


def traceparent_parse(header: str | None, tracestate: str | None = None) -> TraceParent | None:
    """The trace context of a `traceparent` header (and its `tracestate`), or None when it is
    absent or malformed."""
    if not header or len(header) > 512:
        return None
    match = _TRACEPARENT.fullmatch(header.strip(" \t"))
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or parent_id == _ZERO_SPAN:
        return None
    return TraceParent(trace_id=trace_id, parent_id=parent_id, flags=int(flags, 16), tracestate=_tracestate(tracestate))


def _tracestate(header: str | None) -> str:
    if not header or len(header) > _TRACESTATE_MAX:
        return ""
    members = [member.strip(" \t") for member in header.split(",")]
    members = [member for member in members if member]
    if len(members) > 32 or not all(_TRACESTATE_MEMBER.fullmatch(member) for member in members):
        return ""
    keys = [member.split("=", 1)[0] for member in members]
    return ",".join(members) if len(set(keys)) == len(keys) else ""


_incoming: ContextVar[TraceParent | None] = ContextVar("holdpoint_incoming_trace", default=None)


def incoming() -> TraceParent | None:
    """The trace context the current request carried (None: none, a malformed one, or no request)."""
    return _incoming.get()


def incoming_trace_id() -> str:
    """The current request's trace id, "" when it carried none (what the core stores)."""
    trace = _incoming.get()
    return trace.trace_id if trace is not None else ""


def incoming_set(trace: TraceParent | None) -> Token[TraceParent | None]:
    return _incoming.set(trace)


def incoming_reset(token: Token[TraceParent | None]) -> None:
    _incoming.reset(token)


def trace_url(trace_id: str) -> str | None:
    """Where a trace is shown in the team's tracing tool: HOLDPOINT_TRACE_URL with `{trace_id}`
    replaced, or None (no such setting, no trace id, or a URL that is not http(s))."""
    template = settings.HOLDPOINT_TRACE_URL
    if not template or not trace_id or urlsplit(template).scheme not in ("http", "https"):
        return None
    return str(template.replace("{trace_id}", trace_id))
