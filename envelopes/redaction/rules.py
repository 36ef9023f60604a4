"""The machinery of the text rules: a rule is a kind, a pattern, a replacement and a finder.

This runs on every ingest, so the patterns are compiled once and never tried at every position of
the text (slow in `re`): each rule has a finder that locates its candidates with `str.find` or a
pattern that starts with a literal, and the rule's pattern is only tried there; a rule whose gate
(a few substrings, one of which its finder needs) is shut is not tried at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Redacted:
    text: str
    kinds: tuple[str, ...]


def placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


Replacement = Callable[[re.Match[str]], str]
# Where a rule's pattern may match: (text, lowered text) -> start positions.
Finder = Callable[[str, str], Iterable[int]]


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]
    replacement: Replacement
    finder: Finder
    # Rules that judge by context (a name before a value, a host's shape) leave AWS ARNs alone:
    # `arn:aws:secretsmanager:...:secret:prod/db` names a resource and holds no secret.
    spares_arns: bool = False
    # Substrings of the lowered text one of which the finder needs: a rule whose gate is shut is
    # not tried at all, which keeps the cost of a rule that finds nothing near one `in` per name.
    gate: tuple[str, ...] = ()
    # A character every match holds (`=`, `/`): looked for first, as one scan is cheaper than many.
    needs: str = ""


def constant(kind: str) -> Replacement:
    text = placeholder(kind)
    return lambda match: text


def keep_prefix(kind: str) -> Replacement:
    return lambda match: match.group(1) + placeholder(kind)


def find_all(haystack: str, needle: str) -> Iterator[int]:
    index = haystack.find(needle)
    while index != -1:
        yield index
        index = haystack.find(needle, index + 1)


def at(*anchors: str, lowered: bool = False) -> Finder:
    """Matches start at an anchor (the pattern begins with it)."""

    def find(text: str, low: str) -> Iterator[int]:
        for anchor in anchors:
            yield from find_all(low if lowered else text, anchor)

    return find


def walk_back(text: str, index: int, chars: frozenset[str], limit: int) -> int:
    stop = max(0, index - limit)
    while index > stop and text[index - 1] in chars:
        index -= 1
    return index


# A value already replaced by an earlier rule is never redacted twice.
NOT_PLACEHOLDER = r"(?!\[REDACTED:)"


def heads(pattern: str, *, back: str = "") -> Finder:
    """Matches start where `pattern` (on the lowered text) does, or `back` characters before
    when those read `back`: the rule's pattern is only tried where its head is."""
    head = re.compile(pattern)

    def find(text: str, low: str) -> Iterator[int]:
        for found in head.finditer(low):
            yield found.start()
            if back and low.endswith(back, 0, found.start()):
                yield found.start() - len(back)

    return find


# An ARN (AWS docs, "Amazon Resource Names"): arn:partition:service:region:account:resource.
_ARN = re.compile(r"arn:aws(?:-[a-z]+)*:[a-z0-9-]+:[a-z0-9-]*:(?:[0-9]{12}|aws)?:[^\s'\"<>,;]+")


def _arn_spans(text: str) -> list[tuple[int, int]]:
    return [found.span() for found in _ARN.finditer(text)] if "arn:aws" in text else []


def apply_rule(rule: Rule, text: str, lowered: str) -> str:
    """Like `rule.pattern.sub`, but only trying the positions the rule's finder names: the
    patterns' lookbehinds make every other position fail anyway."""
    starts = sorted(set(rule.finder(text, lowered)))
    if not starts:
        return text
    spared = _arn_spans(text) if rule.spares_arns else []
    next_spared = 0  # spared[:next_spared] end before the current start (both run in order)
    pieces: list[str] = []
    done = 0  # text[:done] is settled: copied to `pieces` or replaced
    for start in starts:
        if start < done:
            continue
        match = rule.pattern.match(text, start)
        if match is None or not match.group(0):
            continue
        while next_spared < len(spared) and spared[next_spared][1] <= start:
            next_spared += 1
        if next_spared < len(spared) and spared[next_spared][0] < match.end():
            continue  # the match touches an ARN
        pieces.append(text[done:start])
        pieces.append(rule.replacement(match))
        done = match.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def lower_in_place(text: str) -> str:
    """`text.lower()`, position for position (a few characters grow when lower-cased)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
