"""The name Holdpoint records for an upstream tool.

Holdpoint takes tool names matching `^[a-z0-9][a-z0-9_.-]{0,99}$` (contract §2); MCP servers
name tools as they like (`createInvoice`, `Send Email`, `café`). A valid name is recorded as it
is. Any other is mapped, deterministically and from the name alone: NFKD without its combining
marks, camelCase split into snake_case, lowercase, every other character `_`, cut to fit, and
always `-` plus 8 hex of the SHA-256 of the upstream's own name. From the name alone, because
Holdpoint keys a tool's settings (`required_approvals`, halts) by its name: a name that changed
when the listing changed would silently drop them. The suffix on every mapped name, because
`createInvoice` and `create_invoice` must stay two tools.

A pure function cannot keep apart every pair (a valid name may spell another's mapping), so a
listing is checked too: `ToolNames` refuses a mapped name that another listed name also records.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

MAX_TOOL_NAME = 100
HASH_HEX = 8
_VALID = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")  # fullmatch: `$` would pass a trailing newline
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_OUTSIDE = re.compile(r"[^a-z0-9_.-]+")
_UNDERSCORES = re.compile(r"_{2,}")


def is_valid_tool_name(name: str) -> bool:
    return _VALID.fullmatch(name) is not None


def holdpoint_tool_name(name: str) -> str:
    """The name Holdpoint records for the upstream tool `name` (itself when it is valid)."""
    if is_valid_tool_name(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_HEX]
    decomposed = unicodedata.normalize("NFKD", name)
    plain = "".join(char for char in decomposed if not unicodedata.combining(char))
    snake = _OUTSIDE.sub("_", _CAMEL.sub("_", plain).lower())
    base = _UNDERSCORES.sub("_", snake).lstrip("_.-").rstrip("_")[: MAX_TOOL_NAME - HASH_HEX - 1]
    return f"{base or 'tool'}-{digest}"


class ToolNames:
    """The names the upstream listed, by the Holdpoint name each records."""

    def __init__(self) -> None:
        self._by_recorded: dict[str, set[str]] = {}

    def learn(self, names: Iterable[str]) -> None:
        """Add the names of a tools/list page (kept: a tool may be called after it left a page)."""
        for name in names:
            self._by_recorded.setdefault(holdpoint_tool_name(name), set()).add(name)

    def holdpoint_name(self, name: str) -> str | None:
        """The name Holdpoint records for `name`, or None when another listed tool records it
        too (the call is then refused; a valid name is never refused: it is its own)."""
        recorded = holdpoint_tool_name(name)
        if recorded != name and self._by_recorded.get(recorded, set()) - {name}:
            return None
        return recorded


__all__ = ["MAX_TOOL_NAME", "ToolNames", "holdpoint_tool_name", "is_valid_tool_name"]
