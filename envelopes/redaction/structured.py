"""Untrusted decoded JSON: every string at any depth through `redact`, JSON held in strings as the
values it holds, the value of a key that names a secret as a pair, and (contract §4, the proposed
input) the value of any credential-named key whole."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

from .rules import Redacted, placeholder
from .secrets import (
    BARE_PASS,
    PASSWORD,
    SECRET_NAME_PARTS,
    SESSION_ID,
    SESSION_ID_PARTS,
    is_ordinary_word,
    is_status,
    redact,
)

# --- decoded JSON ----------------------------------------------------------------------------------
#
# A secret written with JSON escapes (`postgres:\\/\\/…`, `\\u0073k-live-…`) is invisible to the
# patterns in the raw text, and readable by whoever decodes it. So a JSON value is redacted as
# decoded strings: every value and key at any depth, and a string that is itself JSON as the values
# it holds. A key-value pair is one text for the pair rules (`"password": "x"`), as it would be in
# the raw text.

# A string holding JSON holding JSON...: redacted as JSON this many levels down, as text below.
_NESTED_JSON_DEPTH = 4
_JSON_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\\\/bfnrt]))')
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
# Contract §4's names, then the ones agents' tool inputs carry too: a bearer or JWT, a signing or
# account key (Azure's `account_key`, a webhook's `signing_key`), and the ways to say credentials.
_CREDENTIAL_NAMES = frozenset(
    {
        "password", "passwd", "secret", "token", "api_key", "apikey", "authorization",
        "private_key", "client_secret", "cookie",
        "passwords", "secrets", "cookies", "pwd", "passphrase", "bearer", "jwt", "creds",
        "credential", "credentials", "signing_key", "account_key", "access_key", "secret_key",
        "encryption_key", "master_key", "session_key", "auth_key",
    }
)  # fmt: skip
_PAIR_NAME_PARTS = SECRET_NAME_PARTS + SESSION_ID_PARTS
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PAIR_RULES = (PASSWORD, SESSION_ID)


def is_credential_key(name: str) -> bool:
    """A key named like a credential (contract §4): one of `_CREDENTIAL_NAMES` (`password`,
    `secret`, `token`, `api_key`, `authorization`, `cookie`, `bearer`, `jwt`, `signing_key`,
    `account_key`, `creds`...), in any case, as the whole name or a `_`/`-` separated part
    (`db_password`, `X-Api-Key`), or two adjacent parts (`signing-key`); camelCase parts count
    too (`authToken`, `accountKey`)."""
    words = _CAMEL_BOUNDARY.sub("_", name).lower().replace("-", "_").split("_")
    return any(word in _CREDENTIAL_NAMES for word in words) or any(
        f"{first}_{second}" in _CREDENTIAL_NAMES for first, second in pairwise(words)
    )


def _storable(text: str) -> str:
    """Surrogate pairs joined, lone surrogates (legal in a JSON escape, not in UTF-8) and NUL (legal
    in JSON, refused by PostgreSQL's text and jsonb) replaced with U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _unescaped(text: str) -> str:
    """`text` with JSON string escapes decoded, a few levels deep (`\\\\/` is an escaped `\\/`)."""
    for _ in range(_NESTED_JSON_DEPTH):
        if "\\" not in text:
            break
        decoded = _JSON_ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else _SIMPLE_ESCAPES[m[2]], text)
        if decoded == text:
            break
        text = _storable(decoded)
    return text


def _redact_text(text: str) -> Redacted:
    """`redact`, and when the text holds JSON escapes that hide a secret, the decoded text redacted."""
    redacted = redact(text)
    if "\\" in text:
        decoded = _unescaped(text)
        if decoded != text:
            redacted_decoded = redact(decoded)
            if set(redacted_decoded.kinds) - set(redacted.kinds):
                return redacted_decoded
    return redacted


class _Walker:
    def __init__(self, *, credential_keys: bool) -> None:
        self.credential_keys = credential_keys
        self.found: set[str] = set()
        self.hits = 0  # values and keys replaced so far
        # The text pass per distinct string, and the credential check per distinct key, once per
        # walk: an array of objects repeats its keys (and often values) hundreds of times, and
        # each text pass tries every rule. Kept for this walk only.
        self.redacted: dict[str, Redacted] = {}
        self.credential: dict[str, bool] = {}
        self.pair_named: dict[str, bool] = {}

    def may_pair(self, key: str) -> bool:
        """Whether `key` can start a pair the pair rules redact: their name part lies within the
        key, and holds one of these words in any case (casefold: the long s and the Kelvin sign match under
        IGNORECASE), so a key without one is never a secret's name."""
        known = self.pair_named.get(key)
        if known is None:
            folded = key.casefold()
            known = self.pair_named[key] = any(part in folded for part in _PAIR_NAME_PARTS)
        return known

    def is_credential(self, key: str) -> bool:
        known = self.credential.get(key)
        if known is None:
            known = self.credential[key] = self.credential_keys and is_credential_key(key)
        return known

    def text(self, text: str, depth: int) -> str:
        text = _storable(text)
        if depth < _NESTED_JSON_DEPTH and text.lstrip()[:1] in ("{", "[", '"'):
            try:
                inner = json.loads(text)
            except (ValueError, RecursionError):
                pass
            else:
                before = self.hits
                walked = self.value(inner, depth + 1)
                if self.hits == before:
                    return text  # kept as sent, not re-serialised
                try:
                    return json.dumps(walked, ensure_ascii=False)
                except (ValueError, RecursionError):
                    self.hits = before  # the text pass below decides
        redacted = self.redacted.get(text)
        if redacted is None:
            redacted = self.redacted[text] = _redact_text(text)
        if redacted.kinds:
            self.found.update(redacted.kinds)
            self.hits += 1
        return redacted.text

    def pair(self, key: str, child: Any, depth: int) -> Any:
        """The value of `key`: replaced whole when the key names a credential (option), or when
        `key: value` is a pair the text rules redact (`password`, `sessionid`...)."""
        if self.is_credential(key):
            self.found.add("key_name")
            self.hits += 1
            return placeholder("key_name")
        if isinstance(child, str | int | float) and not isinstance(child, bool) and self.may_pair(key):
            shown = child if isinstance(child, str) else json.dumps(child)
            pair = f"{key}={json.dumps(shown, ensure_ascii=False)}"
            for pattern in _PAIR_RULES:
                match = pattern.search(pair)
                if match is not None and match.end(1) == len(key) + 1:
                    kind = "session_cookie" if pattern is SESSION_ID else "password"
                    if is_status(shown) or (BARE_PASS.search(match.group(1)) and is_ordinary_word(shown)):
                        break
                    self.found.add(kind)
                    self.hits += 1
                    return placeholder(kind)
        return self.value(child, depth)

    def value(self, root: Any, depth: int) -> Any:
        """Walks without recursion: a decoded body may nest as deep as the JSON decoder allows."""
        result, frame = self.start(root, depth)
        stack = [frame] if frame is not None else []
        while stack:
            out, items = stack[-1]
            for entry in items:
                if isinstance(out, dict):
                    key, child = entry
                    name = self.text(str(key), depth)
                    while name in out:  # two keys that read the same once redacted
                        name += "'"
                    if isinstance(child, dict | list | tuple) and not self.is_credential(str(key)):
                        out[name], frame = self.start(child, depth)
                    else:
                        out[name], frame = self.pair(str(key), child, depth), None
                else:
                    new, frame = self.start(entry, depth)
                    out.append(new)
                if frame is not None:
                    stack.append(frame)
                    break
            else:
                stack.pop()
        return result

    def start(self, item: Any, depth: int) -> tuple[Any, tuple[Any, Iterator[Any]] | None]:
        if isinstance(item, str):
            return self.text(item, depth), None
        if isinstance(item, dict):
            out: dict[str, Any] = {}
            return out, (out, iter(item.items()))
        if isinstance(item, list | tuple):
            items: list[Any] = []
            return items, (items, iter(item))
        return item, None


def redact_json(value: Any, *, credential_keys: bool = False) -> tuple[Any, tuple[str, ...]]:
    """Redact a decoded JSON value; return a redacted copy and the kinds found (sorted).

    Every string at any depth goes through `redact`, object keys included; a string that is
    itself JSON is redacted as the values it holds (and re-serialised only when that changed
    something); the value of a `password`/`secret`/`sessionid`-like key goes whole, as in a
    `name: value` pair in text. With `credential_keys` (contract §4, the proposed input), the
    value of any key named like a credential (`is_credential_key`) becomes `[REDACTED:key_name]`,
    whatever it holds. Strings come back storable (no lone surrogates)."""
    walker = _Walker(credential_keys=credential_keys)
    redacted = walker.value(value, 0)
    return redacted, tuple(sorted(walker.found))


def redact_body(raw: bytes | str, *, credential_keys: bool = True) -> Redacted:
    """A request body as it may be kept (the quarantine): when it parses as JSON, its decoded
    values redacted (`redact_json`) and re-serialised; only a body that does not parse gets the
    raw-text pass (JSON escapes decoded where they hide a secret). Credential-named keys' values
    go whole by default: a rejected body is kept for what broke, not for its secrets."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = _NOT_JSON
    if value is not _NOT_JSON:
        try:
            redacted, kinds = redact_json(value, credential_keys=credential_keys)
            return Redacted(json.dumps(redacted, ensure_ascii=False), kinds)
        except (ValueError, RecursionError):  # nested deeper than the encoder goes
            pass
    return _redact_text(_storable(text))


_NOT_JSON = object()
