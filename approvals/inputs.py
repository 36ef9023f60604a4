"""A tool call's input as the pages show it (contract §7, the proposed action): a tree to read,
what changed against another input, and a one-line summary for the queues.

Everything here is untrusted agent text. The diff and the summary are plain strings that the
templates escape (autoescape, never `|safe`); the tree alone is markup made here, because a
template tag per node was too slow for a 30 KiB input: `input_tree` escapes every key and value
with django.utils.html.escape as it writes them (the browser tests' XSS corpus goes through it).
All of it sits inside an element marked untrusted, with htmx disabled. Characters that hide or
reorder text (bidirectional controls, zero-width characters, control characters) are shown as
`\\u....` so a key or a value reads as what it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString

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


# --- the tree -----------------------------------------------------------------------------------


def _canonical_items(value: dict[str, Any]) -> list[tuple[str, Any]]:
    # Keys in RFC 8785 order (UTF-16 code units), the order the fingerprint reads them: the
    # same on every database (PostgreSQL's jsonb keeps its own order, not the agent's).
    return sorted(
        ((str(key), child) for key, child in value.items()),
        key=lambda pair: pair[0].encode("utf-16-be", "surrogatepass"),
    )


@dataclass(frozen=True)
class InputTree:
    html: SafeString  # nested <ul>/<details>, no JavaScript needed
    redactions: int  # keys and values holding a [REDACTED:…] marker


_HIDDEN_TAG = ' <span class="tag tag-warn">hidden characters shown</span>'
_REDACTED_TAG = ' <span class="tag tag-warn">redacted</span>'


def _readable(raw: str) -> tuple[str, bool]:
    """Agent text with hidden characters written out, and whether it had any."""
    if _HIDDEN.search(raw) is None:
        return raw, False
    return visible(raw), True


def _scalar(value: Any) -> tuple[str, str]:
    """(type, text) of a JSON scalar."""
    if value is None:
        return "null", "null"
    if value is True or value is False:
        return "boolean", "true" if value else "false"
    if isinstance(value, int | float):
        return "number", json.dumps(value)
    return "string", str(value)  # a str, or something JSON never holds: shown as text all the same


def input_tree(value: dict[str, Any]) -> InputTree:
    """The input as a tree to read: objects and arrays as <details> (open down to OPEN_DEPTH),
    keys in canonical order, strings folded beyond FOLD_AT characters, redacted values and hidden
    characters marked. Every key and value is escaped here, the only place this markup is made:
    a template loop would cost a template tag per node, and a large input has thousands."""
    parts: list[str] = []
    redactions = 0
    # (raw key, is an array position, value, depth) to visit; None closes the container above.
    stack: list[tuple[str, bool, Any, int] | None] = [
        (key, False, child, 1) for key, child in reversed(_canonical_items(value))
    ]
    while stack:
        item = stack.pop()
        if item is None:
            parts.append("</ul></details></li>")
            continue
        raw_key, index, child, depth = item
        if index:
            key_html, key_hidden, key_class = raw_key, False, "tree-key tree-index"
        else:
            key_text, key_hidden = _readable(raw_key)
            if "\n" in key_text or "\t" in key_text:  # a key reads on one line, as it is
                key_text, key_hidden = key_text.replace("\t", "\\t").replace("\n", "\\n"), True
            key_html, key_class = escape(key_text), "tree-key"
        key_redacted = not index and REDACTED_MARK in raw_key
        if key_redacted:
            key_class += " redacted"
        if isinstance(child, dict | list):
            if isinstance(child, dict):
                pairs = [(k, False, v) for k, v in _canonical_items(child)]
                size = f"{{ }} {len(pairs)} key{'' if len(pairs) == 1 else 's'}"
            else:
                pairs = [(f"[{i}]", True, v) for i, v in enumerate(child)]
                size = f"[ ] {len(pairs)} item{'' if len(pairs) == 1 else 's'}"
            redactions += key_redacted
            parts.append(
                f'<li class="tree-node"><details{" open" if depth <= OPEN_DEPTH else ""}><summary>'
                f'<span class="{key_class}">{key_html}</span> <span class="tree-type">{size}</span>'
                f'{_REDACTED_TAG if key_redacted else ""}{_HIDDEN_TAG if key_hidden else ""}</summary><ul class="tree">'
            )
            stack.append(None)
            stack.extend((k, i, v, depth + 1) for k, i, v in reversed(pairs))
            continue
        kind, raw_text = _scalar(child)
        text, hidden = _readable(raw_text)
        redacted = key_redacted or (kind == "string" and REDACTED_MARK in raw_text)
        redactions += redacted
        value_class = f"tree-value tree-{kind}{' redacted' if redacted else ''}"
        if kind == "string" and len(text) > FOLD_AT:
            value_html = (
                f'<details class="fold"><summary><span class="{value_class}">{escape(text[:FOLD_HEAD])}…</span> '
                f'<small class="muted">({len(raw_text)} characters)</small></summary>'
                f'<span class="{value_class}">{escape(text)}</span></details>'
            )
        else:
            value_html = f'<span class="{value_class}">{escape(text)}</span>'
        parts.append(
            f'<li class="tree-leaf"><span class="{key_class}">{key_html}</span>: {value_html}'
            f"{_REDACTED_TAG if redacted else ''}{_HIDDEN_TAG if hidden or key_hidden else ''}</li>"
        )
    return InputTree(html=SafeString("".join(parts)), redactions=redactions)


def _canonical_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _canonical_order(child) for key, child in _canonical_items(value)}
    if isinstance(value, list):
        return [_canonical_order(child) for child in value]
    return value


def input_pretty(value: dict[str, Any]) -> str:
    """Indented JSON, keys in canonical order: the text a reviewer edits ("Edit and approve")."""
    return json.dumps(_canonical_order(value), indent=2, ensure_ascii=False)


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
        # One line: tabs and newlines written out too (the tree keeps them, pre-wrapped).
        text = visible(value).replace("\t", "\\t").replace("\n", "\\n")
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
        parts.append(f"{_short(str(key))}: {_short(value)}")
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
