"""A `when` in words, and the `when` prefilled from an approved input ("Approve and allow
similar", §11): what a reviewer reads before a grant is saved."""

from __future__ import annotations

import json
import math
import re
from typing import Any

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# CEL's reserved words cannot be field names after a dot.
_RESERVED = frozenset(
    [
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
        "true",
        "false",
        "null",
        "in",
    ]
)
_REDACTED = re.compile(r"^\[REDACTED(:[^\]]*)?\]$")
_MAX_SCALAR_TEXT = 200

_TOKEN = re.compile(
    r"""(?P<str>[rRbB]{0,2}(?:"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))"""
    r"""|(?P<has>has\(\s*input\.(?P<hasfield>[A-Za-z_][A-Za-z0-9_]*)\s*\))"""
    r"""|(?P<field>input\.(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*))"""
    r"""|(?P<op>&&|\|\||==|!=|>=|<=|>|<|!(?!=))"""
    r"""|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[uU]?)"""
    r"""|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<other>\s+|.)""",
)
_OPS = {
    "&&": "and",
    "||": "or",
    "==": "is",
    "!=": "is not",
    ">=": "is at least",
    "<=": "is at most",
    ">": "is more than",
    "<": "is less than",
    "!": "not",
}
_WORDS = {
    "in": "is one of",
    "true": "true",
    "false": "false",
    "null": "nothing",
    "has_input": "the agent sent its input",
    "run_id": "the run",
    "key": "the API key's name",
    "attempt": "the attempt number",
    "code": "the last error code",
    "state": "the step's state",
    "now": "now",
    "tool": "the tool",
    "input": "the input",
}


def when_in_words(expression: str) -> str:
    """`expression` read aloud: operators and variables in words, values as written, e.g.
    `input.customer == "c_1" && input.amount_cents <= 5000` -> `the input's customer is "c_1" and
    the input's amount_cents is at most 5000`. "every call" for `true`."""
    if expression.strip() == "true":
        return "every call"
    parts: list[str] = []
    for match in _TOKEN.finditer(expression):
        kind = match.lastgroup
        text = match.group()
        if kind == "has":
            parts.append(f"the input has {match.group('hasfield')}")
        elif kind == "field":
            parts.append("the input's " + match.group("name").replace(".", "'s "))
        elif kind == "op":
            parts.append(_OPS[text])
        elif kind == "word":
            parts.append(_WORDS.get(text, text))
        elif kind == "str" or text.strip():
            parts.append(text)
    words = " ".join(parts)
    words = re.sub(r"\s+([,)\]])", r"\1", words)
    words = re.sub(r"([(\[])\s+", r"\1", words)
    return re.sub(r"\s+\.\s*", ".", words).strip()


def _literal(value: Any) -> str | None:
    """A scalar as a CEL literal; None for what equality should not pin (floats that are not
    whole numbers compare badly, long text, redacted values, null, containers)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if -(2**63) <= value < 2**63 else None
    if isinstance(value, float):
        return str(int(value)) + ".0" if math.isfinite(value) and value.is_integer() and abs(value) < 2**53 else None
    if isinstance(value, str):
        if len(value) > _MAX_SCALAR_TEXT or _REDACTED.match(value):
            return None
        return json.dumps(value)  # JSON's string escapes are CEL's
    return None


def grant_when_from_input(input: dict[str, Any] | None) -> str:
    """The `when` a grant made from an approval starts with: equality on each of the approved
    input's top-level scalar fields, in key order ("true" when it has none: the reviewer is
    shown "every call" and should narrow it)."""
    if not isinstance(input, dict):
        return "true"
    terms = []
    for key in sorted(input):
        literal = _literal(input[key])
        if literal is None or not isinstance(key, str):
            continue
        if _IDENT.match(key) and key not in _RESERVED:
            terms.append(f"input.{key} == {literal}")
        else:
            terms.append(f"input[{json.dumps(key)}] == {literal}")
    return " && ".join(terms) if terms else "true"
