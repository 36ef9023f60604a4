"""A tool call's input as the pages show it (contract §7, the proposed action): a tree to read,
what changed against another input, and a one-line summary for the queues.

Everything here is untrusted agent text. It is turned into plain strings and flags only; the
templates escape it (autoescape, never `|safe`) inside an element marked untrusted. Characters
that hide or reorder text (bidirectional controls, zero-width characters, control characters)
are shown as `\\u....` so a key or a value reads as what it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from envelopes.proposal import Change, Proposal, input_diff

# A string longer than this is folded (its head shown, the rest on demand).
FOLD_AT = 160
FOLD_HEAD = 120
# A value shown in the diff (compact JSON) is cut here, with the rest on demand.
DIFF_VALUE_FOLD = 200
# The diff lists at most this many paths (the input is at most 32 KiB, but a reviewer reads it).
DIFF_LIMIT = 200
# The queue's one-line summary.
SUMMARY_LENGTH = 80
SUMMARY_VALUE_LENGTH = 24
# How much of an input's stored JSON the queue reads per row (queries.py): enough for a line.
SUMMARY_SOURCE_CHARS = 600
# Containers this deep or shallower start open in the tree.
OPEN_DEPTH = 2

REDACTED_MARK = "[REDACTED:"

# C0/C1 controls except tab and newline, bidirectional formatting, zero-width and other
# invisible characters, and the replacement character the storage uses for what it cannot keep.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb]"
)


def visible(text: str) -> str:
    """`text` with every hidden or reordering character written out as `\\uXXXX`."""
    return _HIDDEN.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def has_hidden(text: str) -> bool:
    return _HIDDEN.search(text) is not None


# --- the tree -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One line of the tree, in document order. A container is an `open` node, its children,
    then a `close` node; the template nests <details> accordingly (no recursion, no JavaScript)."""

    kind: Literal["open", "close", "leaf"]
    key: str = ""  # the key, or "[3]" for an array item; shown escaped
    index: bool = False  # key is an array position
    type: str = ""  # object | array | string | number | boolean | null
    text: str = ""  # a leaf's value as shown (strings without quotes)
    head: str = ""  # a folded string's beginning
    folded: bool = False
    length: int = 0  # a string's length, a container's item count
    redacted: bool = False  # the value is, or holds, a [REDACTED:…] marker
    hidden: bool = False  # the key or value had hidden characters, now written out
    open: bool = False  # a container that starts unfolded


def _leaf(raw_key: str, index: bool, value: Any) -> Node:
    key = raw_key if index else visible(raw_key)
    key_hidden = not index and has_hidden(raw_key)
    key_redacted = not index and REDACTED_MARK in raw_key
    if isinstance(value, str):
        text = visible(value)
        folded = len(text) > FOLD_AT
        return Node(
            "leaf",
            key=key,
            index=index,
            type="string",
            text=text,
            head=text[:FOLD_HEAD] if folded else "",
            folded=folded,
            length=len(value),
            redacted=key_redacted or REDACTED_MARK in value,
            hidden=key_hidden or has_hidden(value),
        )
    if isinstance(value, bool):
        text = "true" if value else "false"
        kind = "boolean"
    elif value is None:
        text, kind = "null", "null"
    elif isinstance(value, int | float):
        text, kind = json.dumps(value), "number"
    else:  # not JSON; never stored, shown as text all the same
        text, kind = visible(str(value)), "string"
    return Node("leaf", key=key, index=index, type=kind, text=text, redacted=key_redacted, hidden=key_hidden)


def _canonical_items(value: dict[str, Any]) -> list[tuple[str, Any]]:
    # Keys in RFC 8785 order (UTF-16 code units), the order the fingerprint reads them: the
    # same on every database (PostgreSQL's jsonb keeps its own order, not the agent's).
    return sorted(((str(key), child) for key, child in value.items()), key=lambda pair: pair[0].encode("utf-16-be"))


def input_tree(value: dict[str, Any]) -> list[Node]:
    """The input's children as a flat list of nodes (the root object itself is the list), keys
    in canonical order."""
    nodes: list[Node] = []
    # (raw key, is an array position, value, depth) to visit; None closes the container above.
    stack: list[tuple[str, bool, Any, int] | None] = [
        (key, False, child, 1) for key, child in reversed(_canonical_items(value))
    ]
    while stack:
        item = stack.pop()
        if item is None:
            nodes.append(Node("close"))
            continue
        raw_key, index, child, depth = item
        if not isinstance(child, dict | list):
            nodes.append(_leaf(raw_key, index, child))
            continue
        pairs = (
            [(k, False, v) for k, v in _canonical_items(child)]
            if isinstance(child, dict)
            else [(f"[{i}]", True, v) for i, v in enumerate(child)]
        )
        nodes.append(
            Node(
                "open",
                key=raw_key if index else visible(raw_key),
                index=index,
                type="object" if isinstance(child, dict) else "array",
                length=len(pairs),
                open=depth <= OPEN_DEPTH,
                redacted=not index and REDACTED_MARK in raw_key,
                hidden=not index and has_hidden(raw_key),
            )
        )
        stack.append(None)
        stack.extend((k, i, v, depth + 1) for k, i, v in reversed(pairs))
    return nodes


def _canonical_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _canonical_order(child) for key, child in _canonical_items(value)}
    if isinstance(value, list):
        return [_canonical_order(child) for child in value]
    return value


def input_pretty(value: dict[str, Any]) -> str:
    """Indented JSON, keys in canonical order: the text a reviewer edits ("Edit and approve")."""
    return json.dumps(_canonical_order(value), indent=2, ensure_ascii=False)


def redacted_count(nodes: list[Node]) -> int:
    return sum(1 for node in nodes if node.redacted)


# --- what changed ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShownChange:
    path: str  # a JSON Pointer, hidden characters written out
    kind: str  # added | removed | changed
    old: str  # compact JSON ("" when added)
    new: str  # compact JSON ("" when removed)
    old_folded: bool
    new_folded: bool
    redacted: bool


def _compact(value: Any) -> str:
    return visible(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))


def _shown(change: Change) -> ShownChange:
    old = "" if change.kind == "added" else _compact(change.old)
    new = "" if change.kind == "removed" else _compact(change.new)
    return ShownChange(
        path=visible(change.path) or "(the whole input)",
        kind=change.kind,
        old=old,
        new=new,
        old_folded=len(old) > DIFF_VALUE_FOLD,
        new_folded=len(new) > DIFF_VALUE_FOLD,
        redacted=REDACTED_MARK in old or REDACTED_MARK in new,
    )


@dataclass(frozen=True)
class InputComparison:
    """`proposal` against the input before it (the previous attempt's, or the proposal an edit
    started from). `against` is None when there is nothing to compare with."""

    against: Proposal | None
    changes: list[ShownChange]
    more: int  # changes beyond DIFF_LIMIT, not listed

    @property
    def same(self) -> bool:
        return self.against is not None and not self.changes and not self.more

    @property
    def against_had_input(self) -> bool:
        return self.against is not None and self.against.input is not None


def input_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> tuple[list[ShownChange], int]:
    changes = input_diff(old, new)
    return [_shown(change) for change in changes[:DIFF_LIMIT]], max(0, len(changes) - DIFF_LIMIT)


def compare(proposal: Proposal, against: Proposal | None) -> InputComparison:
    if against is None or against.input is None or proposal.input is None:
        return InputComparison(against=against, changes=[], more=0)
    if against.input_fingerprint == proposal.input_fingerprint:
        return InputComparison(against=against, changes=[], more=0)
    changes, more = input_changes(against.input, proposal.input)
    return InputComparison(against=against, changes=changes, more=more)


# --- the queue's one line -------------------------------------------------------------------------

_decoder = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "{…}" if value else "{}"
    if isinstance(value, list):
        return "[…]" if value else "[]"
    if isinstance(value, str):
        text = visible(value)
        return text if len(text) <= SUMMARY_VALUE_LENGTH else text[: SUMMARY_VALUE_LENGTH - 1] + "…"
    return json.dumps(value)


def input_summary(source: str | None) -> str:
    """`amount: 1250, customer: cus_9, …` from the beginning of an input's stored JSON text
    (possibly cut short: the queue reads SUMMARY_SOURCE_CHARS of it). "" when there is no input."""
    if not source:
        return ""
    parts: list[str] = []
    position = _SPACE.match(source, 0).end()  # type: ignore[union-attr]
    if source[position : position + 1] != "{":
        return ""
    position += 1
    complete = False
    while True:
        position = _SPACE.match(source, position).end()  # type: ignore[union-attr]
        if source[position : position + 1] == "}":
            complete = True
            break
        try:
            key, position = _decoder.raw_decode(source, position)
            position = _SPACE.match(source, position).end()  # type: ignore[union-attr]
            if source[position : position + 1] != ":":
                break
            position = _SPACE.match(source, position + 1).end()  # type: ignore[union-attr]
            value, position = _decoder.raw_decode(source, position)
        except ValueError:
            break  # cut short here
        parts.append(f"{_short(visible(str(key)))}: {_short(value)}")
        if len(", ".join(parts)) > SUMMARY_LENGTH:
            break
        position = _SPACE.match(source, position).end()  # type: ignore[union-attr]
        if source[position : position + 1] == ",":
            position += 1
    if not parts:
        return "{}" if complete else "…"
    line = ", ".join(parts)
    if len(line) > SUMMARY_LENGTH:
        return line[: SUMMARY_LENGTH - 1] + "…"
    return line if complete else line + ", …"
