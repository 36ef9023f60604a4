"""Instruction-like text (prompt injection) in untrusted strings: flagged, never acted on."""

from __future__ import annotations

import re
import unicodedata


def _word(literal: str) -> str:
    """`literal` at the start of a word. The boundary is checked *after* the literal so that the
    pattern still starts with it: `re` then skips ahead to candidates instead of trying every
    position."""
    return f"{literal}(?<![a-z0-9]{literal})"


_ANY_WORDS = r"(?:\S+\s+){0,4}?"
_RULE_WORDS = r"(?:instructions?|prompts?|polic(?:y|ies)|rules|guidelines|guardrails|safety|directives?)\b"
_PRIVILEGE = r"(?:admin|administrator|root|elevated|sudo|superuser)"
_INSTRUCTION_PATTERNS = [
    _word("ignore") + r"\s+" + _ANY_WORDS + _RULE_WORDS,
    _word("ignore") + r"\s+(?:(?:all|any|the|your|of)\s+)*(?:previous|prior|above|earlier)\b",
    _word("disregard") + r"\s+" + _ANY_WORDS + _RULE_WORDS,
    _word("forget") + r"\s+" + _ANY_WORDS + r"(?:instructions?|rules|everything|polic(?:y|ies))",
    _word("override") + r"\s+" + _ANY_WORDS + r"(?:polic(?:y|ies)|safety|guardrails?|restrictions?"
    r"|rules|instructions?)\b",
    _word("bypass") + r"\s+" + _ANY_WORDS + r"(?:approvals?|review|safety|polic(?:y|ies)"
    r"|restrictions?|guardrails?|checks?)\b",
    _word("you") + r"\s+are\s+now\b",
    _word("system") + r"\s+prompt\b",
    r"run\s+(?:this|it|that)\s+(?:\S+\s+){0,2}?(?:with|as|using|under)\s+(?:an?\s+)?" + _PRIVILEGE,
    _word("with") + r"\s+" + _PRIVILEGE + r"\s+(?:access|privileges?|rights|permissions?)\b",
    _word("as") + r"\s+(?:an?\s+)?(?:admin(?:istrator)?|root|superuser)\b",
    _word("sudo") + r"\b",
    _word("exfiltrat"),
    _word("send") + r"\s+(?:\S+\s+){0,8}?to\s+(?:https?://|ftp://|\S+@\S+\.\S)",
    _word("execute") + r"\s+the\s+following\b",
    _word("run") + r"\s+the\s+following\s+(?:command|code|script)",
    _word("new") + r"\s+instructions?\s*:",
    _word("developer") + r"\s+mode\b",
    _word("jailbreak"),
    _word("do") + r"\s+not\s+(?:tell|inform|alert|notify)\s+the\s+(?:user|human|operator|reviewer)",
    r"<\|\s*(?:system|im_start|im_end)",
    r"<\s*/?\s*system\s*>",
    r"\[inst\]",
    r"\[/inst\]",
    r"##+\s*(?:system|instructions?)\b",
    *(
        _word(verb) + r"\s+(?:\S+\s+){0,3}?(?:system\s+prompt|instructions|api\s+keys?|secrets?"
        r"|credentials|passwords?|environment\s+variables)\b"
        for verb in ("reveal", "print", "show", "output", "leak", "dump")
    ),
]
_INSTRUCTIONS = tuple(re.compile(pattern) for pattern in _INSTRUCTION_PATTERNS)
# Zero-width and other format characters would otherwise split a phrase invisibly.
_FORMAT_CHARS = re.compile(r"[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]")


def looks_like_instruction(text: str) -> bool:
    """True when `text` reads like an instruction to the agent (prompt injection). Flags only."""
    if not text:
        return False
    if not text.isascii():
        text = _FORMAT_CHARS.sub("", unicodedata.normalize("NFKC", text))
    lowered = text.lower()
    return any(pattern.search(lowered) for pattern in _INSTRUCTIONS)
