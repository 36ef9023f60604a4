"""Secrets and instruction-like text in untrusted strings.

Everything an agent sends is untrusted: messages, safe_details values, resource ids. Before any
of it is stored, `redact` replaces secrets with `[REDACTED:<kind>]`, and `looks_like_instruction`
flags prompt-injection-shaped text. Flagging never changes behaviour: no branch anywhere may
depend on message text (contract, section 2).

Pure Python, no Django. This runs on every ingest, so the patterns are compiled once and never
tried at every position of the text (slow in `re`): each rule has a finder that locates its
candidates with `str.find` or a pattern that starts with a literal, and the rule's pattern is
only tried there. A secret-free 1 KB message stays well under 50 microseconds.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

__all__ = [
    "KINDS",
    "Redacted",
    "is_credential_key",
    "looks_like_instruction",
    "redact",
    "redact_body",
    "redact_json",
]

KINDS = (
    "private_key",
    "connection_string",
    "webhook_url",
    "url_credentials",
    "bearer_token",
    "basic_auth",
    "session_cookie",
    "jwt",
    "aws_access_key",
    "api_key",
    "password",
    "internal_host",
    "key_name",
)


@dataclass(frozen=True)
class Redacted:
    text: str
    kinds: tuple[str, ...]


def _placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


Replacement = Callable[[re.Match[str]], str]
# Where a rule's pattern may match: (text, lowered text) -> start positions.
Finder = Callable[[str, str], Iterable[int]]


@dataclass(frozen=True)
class _Rule:
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


def _constant(kind: str) -> Replacement:
    text = _placeholder(kind)
    return lambda match: text


def _keep_prefix(kind: str) -> Replacement:
    return lambda match: match.group(1) + _placeholder(kind)


def _find_all(haystack: str, needle: str) -> Iterator[int]:
    index = haystack.find(needle)
    while index != -1:
        yield index
        index = haystack.find(needle, index + 1)


def _at(*anchors: str, lowered: bool = False) -> Finder:
    """Matches start at an anchor (the pattern begins with it)."""

    def find(text: str, low: str) -> Iterator[int]:
        for anchor in anchors:
            yield from _find_all(low if lowered else text, anchor)

    return find


def _walk_back(text: str, index: int, chars: frozenset[str], limit: int) -> int:
    stop = max(0, index - limit)
    while index > stop and text[index - 1] in chars:
        index -= 1
    return index


# A value already replaced by an earlier rule is never redacted twice.
_NOT_PLACEHOLDER = r"(?!\[REDACTED:)"

_PRIVATE_KEY = re.compile(
    # A block cut off before its END line is still a key: it is redacted to the end of the text.
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)

_CONNECTION_URL = re.compile(
    r"(?<![A-Za-z0-9+.-])(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?"
    r"|mssql|sqlserver|oracle|cockroachdb)://[^\s'\"<>`]+",
    re.IGNORECASE,
)

# ADO.NET / ODBC style `Server=db;Database=x;User Id=u;Password=p;`: the whole run goes, but
# only when it carries a password (a bare `Host=x;Port=y` is left to the host:port rule).
_CONNECTION_PAIRS = re.compile(
    r"(?<![A-Za-z0-9])(?:server|data source|host|hostname|address|addr)\s*=[^;\r\n'\"]{0,500}"
    r"(?:;[ \t]*[A-Za-z][A-Za-z0-9 _]{0,50}=[^;\r\n'\"]{0,500}){1,50};?",
    re.IGNORECASE,
)
_CONNECTION_PAIRS_SECRET = re.compile(r"(?:^|;)[ \t]*(?:password|pwd)[ \t]*=", re.IGNORECASE)


def _connection_pairs(match: re.Match[str]) -> str:
    if _CONNECTION_PAIRS_SECRET.search(match.group(0)):
        return _placeholder("connection_string")
    return match.group(0)


# Azure storage / Service Bus / Event Hubs connection strings: the key's value goes, the account
# and endpoint names stay (noseyparker np.azure.1, "Azure Connection String").
_AZURE_KEY_NAMES = ("accountkey", "sharedaccesskey", "sharedsecretvalue")
_AZURE_KEY = re.compile(
    r"((?:AccountKey|SharedAccessKey|SharedSecretValue)[ \t]*=[ \t]*)" + _NOT_PLACEHOLDER + r"[A-Za-z0-9/+]{20,}={0,3}",
    re.IGNORECASE,
)

# A signed URL's signature grants what the URL names to whoever holds it: Azure SAS `sig=`
# (trufflehog azuresastoken, microsoftteamswebhook v2), AWS and GCS presigned URLs.
_SIGNED_URL = re.compile(
    r"((?:sig|x-amz-signature|x-amz-security-token|x-goog-signature)=)"
    + _NOT_PLACEHOLDER
    + r"(?:[A-Za-z0-9+/_.-]|%[0-9A-Fa-f]{2}){10,}={0,2}",
    re.IGNORECASE,
)
_SIGNED_URL_NAMES = ("sig=", "x-amz-signature=", "x-amz-security-token=", "x-goog-signature=")


def _find_signed_urls(text: str, lowered: str) -> Iterator[int]:
    """Each name at a query or pair boundary (`?sig=`, `&sig=`, ` sig=`), never inside a word."""
    for name in _SIGNED_URL_NAMES:
        for index in _find_all(lowered, name):
            if index == 0 or lowered[index - 1] in "?&; \t\n\"'":
                yield index


# `mysql -u app -pS3cret shop`: the password is glued to `-p` (`-p` alone prompts, and `-P` is the
# port); `--password=` is a pair the password rule takes.
_MYSQL_PASSWORD = re.compile(
    r"((?<![A-Za-z0-9_])(?i:mysql|mariadb)[a-z-]*(?:[ \t]+\S+){0,30}?[ \t]+-p)"
    + _NOT_PLACEHOLDER
    + r"(?:'[^'\r\n]*'|\"[^\"\r\n]*\"|[^\s'\"]+)"
)

# A .pgpass line, `host:port:database:user:password` (PostgreSQL docs, "The Password File"): the
# password goes. The host holds a letter or a dot, so that `00:11:22:33:44:55` is no such line.
_PGPASS = re.compile(
    r"(?<![^\s'\"`])((?:[A-Za-z0-9_.-]*[A-Za-z.][A-Za-z0-9_.-]*|\*|\[[0-9A-Fa-f:.]+\])"
    r":(?:[0-9]{1,5}|\*):[^:\s'\"]+:[^:\s'\"]+:)" + _NOT_PLACEHOLDER + r"[^\s'\"]+"
)
_PGPASS_FIELDS = re.compile(r":(?:[0-9]{1,5}|\*):[^:\s'\"]+:[^:\s'\"]+:")
_PGPASS_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-*[]:")


def _find_pgpass_lines(text: str, lowered: str) -> Iterator[int]:
    if text.count(":") < 4:
        return
    for found in _PGPASS_FIELDS.finditer(text):
        yield _walk_back(text, found.start(), _PGPASS_HOST_CHARS, 255)


def _pgpass(match: re.Match[str]) -> str:
    try:
        ipaddress.ip_address(match.group(0))  # an IPv6 address reads like one too
    except ValueError:
        return match.group(1) + _placeholder("password")
    return match.group(0)


# scheme://user:password@host keeps the scheme and the host. The greedy password part backtracks
# to the last `@` of the authority, so a password containing `@` does not leak its tail; it may
# also hold a raw `?` or `#` (invalid, but a secret all the same).
_URL_CREDENTIALS = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@:'\"<>]*:[^\s/'\"<>]*@")

_AUTHORIZATION_HEADER = re.compile(
    r"(?<![A-Za-z0-9])(authorization[\"']?[ \t]*[:=][ \t]*[\"']?)" + _NOT_PLACEHOLDER + r"[^\r\n\"']+",
    re.IGNORECASE,
)


def _authorization(match: re.Match[str]) -> str:
    if _is_status(match.group(0)[match.end(1) - match.start() :].strip()):
        return match.group(0)  # "Authorization: missing"
    return match.group(1) + _placeholder("bearer_token")


# The token must look like one (a digit or a symbol, or long), so that prose such as "the Bearer
# token expired" survives.
_BEARER = re.compile(
    r"(?<![A-Za-z0-9])(bearer\s+)(?:(?=[A-Za-z]*[0-9\-._~+/])[A-Za-z0-9\-._~+/]{4,}|[A-Za-z]{20,})=*",
    re.IGNORECASE,
)

_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*")

_AWS_ACCESS_KEY = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}")

# A vendor's key or token, known by its prefix; one line per family, after the published pattern
# it follows (gitleaks config/gitleaks.toml, trufflehog pkg/detectors, noseyparker rules). Lengths
# are lower bounds, so a longer or newer token of the family is redacted too.
_API_KEY = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    # OpenAI / Anthropic / OpenRouter: long (gitleaks openai-api-key, anthropic-api-key), so that
    # `sk-1234` or `sk-small-blue-v2` product codes stay; a dashed key's tail holds a digit.
    r"sk-[A-Za-z0-9]{20,}|sk-(?:[a-z][a-z0-9]{1,9}-){1,3}(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{20,}"
    r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}"  # Stripe (gitleaks stripe-access-token)
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub (gitleaks github-*)
    r"|xox[abeoprs]-[A-Za-z0-9-]{8,}|xoxe\.xox[bp]-[A-Za-z0-9-]{8,}"  # Slack (gitleaks slack-*-token)
    r"|xapp-[0-9]-[A-Za-z0-9-]{8,}"  # Slack app-level token (gitleaks slack-app-token)
    r"|hpr?_[A-Za-z0-9_-]{16,}"  # Holdpoint API keys and reviewer tokens ("hp_"/"hpr_" + token_urlsafe)
    r"|whsec_[A-Za-z0-9+/=]{16,}"  # Holdpoint / Standard Webhooks signing secrets
    r"|AIza[A-Za-z0-9_-]{30,}"  # Google API key (gitleaks gcp-api-key)
    r"|ya29\.[A-Za-z0-9_-]{20,}"  # Google OAuth access token (noseyparker np.google.4)
    r"|GOCSPX-[A-Za-z0-9_-]{24,}"  # Google OAuth client secret (noseyparker np.google.2)
    r"|SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,64}"  # SendGrid (trufflehog sendgrid)
    r"|hv[sbr]\.[A-Za-z0-9_-]{24,}"  # Vault service/batch/recovery tokens (trufflehog hashicorpvault)
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face (trufflehog huggingface)
    r"|pypi-AgE[A-Za-z0-9_-]{50,}"  # PyPI and TestPyPI upload tokens (gitleaks pypi-upload-token)
    r"|do[opr]_v1_[a-f0-9]{64}"  # DigitalOcean (trufflehog digitaloceanv2)
    r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"  # Shopify (gitleaks shopify-*)
    r"|glpat-[A-Za-z0-9_-]{16,}|npm_[A-Za-z0-9]{30,}"  # GitLab, npm (gitleaks gitlab-pat, npm-access-token)
    r")"
)
# Every prefix but Google's API key ends with `_`, `-` or `.`: those few characters are the anchors.
_API_KEY_PREFIXES = (
    "sk-", "sk_", "pk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hp_", "hpr_",
    "whsec_", "glpat-", "npm_", "xoxe.", "xapp-", "ya29.", "GOCSPX-", "SG.", "hvs.", "hvb.", "hvr.",
    "hf_", "pypi-", "dop_", "doo_", "dor_", "shpat_", "shpss_", "shpca_", "shppa_",
    *(f"xox{c}-" for c in "abeoprs"),
)  # fmt: skip


# Searched in the reversed text, where every prefix starts with a literal `_`, `-` or `.`.
_REVERSED_API_KEY_PREFIXES = tuple(
    re.compile(
        re.escape(separator)
        + "(?:"
        + "|".join(re.escape(p[-2::-1]) for p in _API_KEY_PREFIXES if p.endswith(separator))
        + ")"
    )
    for separator in ("_", "-", ".")
)


def _find_api_keys(text: str, lowered: str) -> Iterator[int]:
    reversed_text, last = text[::-1], len(text) - 1
    for separator, pattern in zip("_-.", _REVERSED_API_KEY_PREFIXES, strict=True):
        if separator in text:
            for found in pattern.finditer(reversed_text):
                yield last - found.end() + 1
    yield from _find_all(text, "AIza")


# Telegram bot tokens, `<bot id>:AA<33 characters>`, also inside `api.telegram.org/bot<token>/`
# (noseyparker np.telegram.1).
_TELEGRAM_BOT_TOKEN = re.compile(r"(?<![0-9])[0-9]{5,16}:AA[A-Za-z0-9_-]{32,}")
_DIGITS = frozenset("0123456789")


def _find_telegram_tokens(text: str, lowered: str) -> Iterator[int]:
    for index in _find_all(text, ":AA"):
        yield _walk_back(text, index, _DIGITS, 16)


# The value of a `name: value` pair: a quoted string (quotes kept, so JSON-ish text still reads
# as JSON) or a run up to a separator.
_PAIR_VALUE = r"(?:\"((?:[^\"\\\r\n]|\\.)+)\"|'([^'\r\n]+)'|([^\s&;,\"'<>(){}\[\]]+))"

# `password=...`, `db_password: ...`, `"client_secret": "..."`, `X-Api-Key: ...`, `pass: ...`: the
# name and the separator stay, the value goes. A bare `pass` must be a word of its own (not
# `bypass:`), and an ordinary word after it stays (`pass: true`).
_PASSWORD = re.compile(
    r"([A-Za-z0-9_.-]{0,40}?(?:password|passwd|pwd|passphrase|secret(?:[_-]?(?:access[_-]?)?key)?"
    r"|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|cred(?:ential)?s?|(?<![A-Za-z])pass(?![A-Za-z]))"
    r"[\"']?[ \t]*[:=][ \t]*)" + _NOT_PLACEHOLDER + _PAIR_VALUE,
    re.IGNORECASE,
)
_SECRET_NAME_PARTS = ("pass", "pwd", "secret", "token", "key", "cred")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_THEN_SEPARATOR = re.compile(r"[a-z0-9_.-]*[\"']?[ \t]*[:=]")


def _find_passwords(text: str, lowered: str) -> Iterator[int]:
    """The start of every word that contains a part of a secret's name and ends in `:` or `=`."""
    for part in _SECRET_NAME_PARTS:
        for index in _find_all(lowered, part):
            if _NAME_THEN_SEPARATOR.match(lowered, index + len(part)):
                yield _walk_back(lowered, index, _NAME_CHARS, 40)


def _pair(kind: str) -> Replacement:
    """The value of a `name: value` pair redacted, unless it states a condition (`_is_status`)."""

    def replace(match: re.Match[str]) -> str:
        if _is_status(match.group(2) or match.group(3) or match.group(4)):
            return match.group(0)
        if match.group(2) is not None:
            return f'{match.group(1)}"{_placeholder(kind)}"'
        if match.group(3) is not None:
            return f"{match.group(1)}'{_placeholder(kind)}'"
        return match.group(1) + _placeholder(kind)

    return replace


_BARE_PASS = re.compile(r"(?<![a-z])pass[\"']?[ \t]*[:=][ \t]*\Z", re.IGNORECASE)
_password_pair = _pair("password")


def _password(match: re.Match[str]) -> str:
    value = match.group(2) or match.group(3) or match.group(4)
    if _BARE_PASS.search(match.group(1)) and _is_ordinary_word(value):
        return match.group(0)  # "pass: true", "pass: none": a word, not a secret
    return _password_pair(match)


# Words that follow "password is" or "pass:" in prose and in logs, never a secret worth the name:
# "the password is incorrect", "pass: true". Anything else after those words is redacted.
_ORDINARY_WORDS = frozenset(
    {
        "a", "an", "the", "not", "no", "now", "still", "too", "very", "being", "been", "set",
        "unset", "empty", "blank", "missing", "required", "needed", "optional", "incorrect",
        "correct", "invalid", "valid", "wrong", "right", "expired", "weak", "strong", "short",
        "long", "ok", "okay", "fine", "good", "bad", "same", "different", "changed", "reset",
        "locked", "unlocked", "disabled", "enabled", "hidden", "shown", "stored", "saved", "hashed",
        "encrypted", "encoded", "null", "none", "nil", "undefined", "true", "false", "yes",
        "unknown", "redacted", "protected", "sensitive", "mandatory", "unchanged", "updated", "due",
        "at", "in", "on", "for", "of", "to", "from", "with", "without", "that", "this", "it",
        "your", "my", "their", "his", "her", "its", "our", "also", "only", "just", "never",
        "always", "already", "then", "so", "and", "or", "but", "less", "more", "longer", "shorter",
        "reused", "compromised", "leaked", "case", "incomplete", "insecure", "secure", "mismatched",
        "present", "absent", "known", "new", "old", "temporary", "is", "are", "was", "were", "be",
        "must", "revoked", "rejected", "denied", "malformed", "provided", "supplied", "forbidden",
        "unauthorized", "expiring", "mismatch", "rotated", "deprecated", "failed", "error",
        "ignored", "pending", "configured", "unconfigured", "unsupported", "unavailable",
        "omitted", "masked", "truncated", "placeholder", "found", "given", "specified", "defined",
        "accepted", "refused", "many", "few", "format", "length",
    }
)  # fmt: skip
_PROSE_SUFFIXES = ("ed", "ing", "ly", "ble")


def _is_ordinary_word(value: str) -> bool:
    word = value.lower()
    if not (word.isascii() and word.isalpha()):
        return False
    return word in _ORDINARY_WORDS or (len(word) > 4 and word.endswith(_PROSE_SUFFIXES))


_STATUS_PARTS = re.compile(r"[ _-]")
_MASK_CHARS = frozenset("*\u2022")


def _is_status(value: str) -> bool:
    """Whether the value after a secret's name states a condition instead of holding the secret:
    `password: required`, `token: expired`, `credentials: invalid`, `"secret": "not set"`,
    `api_key: NOT_SET`, `password: ****`. The rule: one to four words, each from the closed list
    `_ORDINARY_WORDS`, in any case, joined by spaces, `_` or `-`; or a mask of `*` or `•`. No
    length, entropy or charset test: a short or all-letter value (`hunter`, `letmein`) may be the
    password itself, so anything outside the list is redacted. Hiding `required` would hide the
    very error a reviewer needs; a password that is literally `required` is no secret worth it."""
    if not value or len(value) > 40:
        return False
    if set(value) <= _MASK_CHARS:
        return True
    parts = _STATUS_PARTS.split(value.lower())
    return len(parts) <= 4 and all(part in _ORDINARY_WORDS for part in parts)


# "the password is hunter2", "your new passphrase was 'correct horse'": prose that states one.
# Trailing sentence punctuation stays outside the value; an ordinary word stays as it is
# ("the password is incorrect", "password reset email sent" has no "is" at all).
_PASSWORD_IS = re.compile(
    r"(?<![A-Za-z0-9_-])((?:password|passwd|passphrase|passcode)[ \t]+(?:is|was)[ \t]*:?[ \t]+)"
    + _NOT_PLACEHOLDER
    + r"(?:\"((?:[^\"\\\r\n]|\\.)+)\"|'([^'\r\n]+)'|([^\s\"'<>]+?))(?=[.,;:)]*(?:\s|\Z))",
    re.IGNORECASE,
)


def _password_is(match: re.Match[str]) -> str:
    if match.group(4) is not None and _is_ordinary_word(match.group(4)):
        return match.group(0)
    return _password_pair(match)


# Session cookies and the Cookie header: whoever holds one is logged in as its owner. The header's
# whole value goes (it holds every cookie of the site), but only when it holds a `name=value`, so
# that "cookie: disabled" stays.
_COOKIE_HEADER = re.compile(
    r"(?<![A-Za-z0-9_-])((?:set-)?cookie[\"']?[ \t]*:[ \t]*[\"']?)" + _NOT_PLACEHOLDER + r"(?=[^\r\n\"']*=)[^\r\n\"']+",
    re.IGNORECASE,
)
_SESSION_ID = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]{0,30}?(?:session[_.-]?id|sessid|connect\.sid)"
    r"[\"']?[ \t]*[:=][ \t]*)" + _NOT_PLACEHOLDER + _PAIR_VALUE,
    re.IGNORECASE,
)
_SESSION_ID_PARTS = ("session", "sessid", "connect.sid")
_SESSION_ID_THEN_SEPARATOR = re.compile(r"(?:session[_.-]?id|sessid|connect\.sid)[\"']?[ \t]*[:=]")


def _find_session_ids(text: str, lowered: str) -> Iterator[int]:
    for part in _SESSION_ID_PARTS:
        for index in _find_all(lowered, part):
            if _SESSION_ID_THEN_SEPARATOR.match(lowered, index):
                yield _walk_back(lowered, index, _NAME_CHARS, 30)


# `Basic <base64 of user:password>` outside an Authorization header (the header rule takes the
# header form). The token must decode to `user:password`, or look like a token, so that "Basic
# authentication failed" survives.
# An all-lowercase word is never base64 of `user:password` (its `:` makes mixed case).
_BASIC = re.compile(
    r"(?<![A-Za-z0-9])((?i:basic)[ \t]+)(?=[a-z]*[A-Z0-9+/])([A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])"
)


def _basic(match: re.Match[str]) -> str:
    token = match.group(2)
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    user_and_password = decoded.isascii() and b":" in decoded and decoded.decode().isprintable()
    looks_like_token = len(token) >= 16 and any(c.isdigit() or c in "+/=" for c in token)
    if user_and_password or looks_like_token:
        return match.group(1) + _placeholder("basic_auth")
    return match.group(0)


# Incoming-webhook URLs carry their credential in the path: whoever holds one posts as the app.
# Microsoft Teams incoming webhooks: `<tenant>.webhook.office.com/webhookb2/...` and the older
# `outlook.office.com/webhook/...` (gitleaks microsoft-teams-webhook, noseyparker np.msteams.1).
_WEBHOOK_URL = re.compile(
    r"((?:https?://)?(?:hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)"
    r"|(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks"
    r"|(?:[a-z0-9-]+\.)?webhook\.office\.com/webhookb2|outlook\.office(?:365)?\.com/webhook)/)[^\s'\"<>`]+",
    re.IGNORECASE,
)
_WEBHOOK_HOSTS = ("hooks.slack", "discord", "webhook.office", "outlook.office")
_LOWER_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")


def _find_webhook_urls(text: str, lowered: str) -> Iterator[int]:
    for index in (i for host in _WEBHOOK_HOSTS for i in _find_all(lowered, host)):
        start = _walk_back(lowered, index, _LOWER_HOST_CHARS, 20)
        for scheme in ("https://", "http://"):
            if lowered.endswith(scheme, 0, start):
                yield start - len(scheme)
        yield start


def _heads(pattern: str, *, back: str = "") -> Finder:
    """Matches start where `pattern` (on the lowered text) does, or `back` characters before
    when those read `back`: the rule's pattern is only tried where its head is."""
    head = re.compile(pattern)

    def find(text: str, low: str) -> Iterator[int]:
        for found in head.finditer(low):
            yield found.start()
            if back and low.endswith(back, 0, found.start()):
                yield found.start() - len(back)

    return find


_HOST_PORT = re.compile(
    r"(?<![A-Za-z0-9.\-])"
    r"(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?){0,126})"
    r":([0-9]{1,5})(?![0-9])"
)
_INTERNAL_SUFFIXES = (".internal", ".local", ".lan", ".corp", ".intranet", ".home.arpa")
_INTERNAL_NAME_SUFFIXES = (*_INTERNAL_SUFFIXES, ".localdomain", ".svc", ".private")
# A dotted internal name is redacted even without a port: the name alone invites a connection.
_INTERNAL_NAME = re.compile(
    r"(?<![A-Za-z0-9_.-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?\.){1,126}"
    r"(?:internal|local|localdomain|lan|corp|intranet|home\.arpa)(?![A-Za-z0-9-]|\.[A-Za-z0-9])",
    re.IGNORECASE,
)
# A name whose first label is a configuration file's stem names a file or a module, not a host
# (`config.local`, `appsettings.local`, the module `config.settings.local`); so does a part of a
# path (`/etc/app/site.local`), but not a name after `//` or `\\` (`\\\\nas.corp\\share`).
_FILE_STEMS = frozenset(
    {
        "config", "configuration", "conf", "settings", "appsettings", "application", "env",
        "environment", "values", "vars", "variables", "parameters", "properties", "overrides",
        "override", "secrets", "credentials", "docker-compose", "compose", "defaults", "package",
    }
)  # fmt: skip


def _internal_name(match: re.Match[str]) -> str:
    name, text, start = match.group(0), match.string, match.start()
    if name.split(".", 1)[0].lower() in _FILE_STEMS:
        return name
    if start > 0 and text[start - 1] in "/\\" and not text.endswith(("//", "\\\\"), 0, start):
        return name
    return _placeholder("internal_host")


_SINGLE_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9-]*[A-Za-z0-9]")
# A single-label name only counts when it looks like a service host (a hyphen or a digit, as in
# `db-primary:5432`, or a well-known service name), so that `Error:404` or `line:42` survive.
_SERVICE_NAMES = frozenset(
    {
        "localhost", "db", "database", "postgres", "postgresql", "mysql", "mariadb", "mongo",
        "mongodb", "redis", "rabbitmq", "kafka", "zookeeper", "memcached", "elasticsearch",
        "opensearch", "minio", "consul", "vault", "etcd", "nats", "broker", "cache", "backend",
        "api", "web", "app", "worker", "proxy", "gateway", "ldap", "smtp", "mail", "mssql",
    }
)  # fmt: skip
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def _is_internal_ip(text: str) -> bool:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or (address.version == 4 and address in _CGNAT)
    )


def _is_internal_host(host: str) -> bool:
    if not host or host.isdigit():
        return False
    if host.startswith("["):
        return _is_internal_ip(host[1:-1])
    lowered = host.lower()
    if lowered == "localhost" or lowered.endswith(_INTERNAL_NAME_SUFFIXES):
        return True
    if "." in host:
        return _is_internal_ip(host)
    return bool(_SINGLE_LABEL.fullmatch(host)) and (
        "-" in host or any(c.isdigit() for c in host) or lowered in _SERVICE_NAMES
    )


def _host_port(match: re.Match[str]) -> str:
    if 0 < int(match.group(2)) <= 65535 and _is_internal_host(match.group(1)):
        return _placeholder("internal_host")
    return match.group(0)


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")
_SCHEME_CHARS = _HOST_CHARS | {"+"}


# Searched in the reversed text, where `host:port` reads `trop:tsoh`: the pattern then starts
# with a literal, which `re` scans for quickly, and the host is the run of host characters after
# the colon (a forward pattern would be tried at every position).
# A run of digits alone (`10:30`) is no host, and is skipped without leaving C.
_REVERSED_HOST_PORT = re.compile(r":(?<=[0-9]:)(?=[A-Za-z0-9.\-]{0,254}[A-Za-z.\-])([A-Za-z0-9.\-]{1,255})")
_SUFFIX = re.compile(r"\.(?:internal|local|lan|corp|intranet|home\.arpa)")


def _find_host_ports(text: str, lowered: str) -> Iterator[int]:
    if ":" not in text:
        return
    last = len(text) - 1
    for found in _REVERSED_HOST_PORT.finditer(text[::-1]):
        host = found.group(1)[::-1]
        # Most colons before digits are times and counters: only internal hosts go further.
        if _is_internal_host(host):
            yield last - found.start() - len(host)
    for index in _find_all(text, "]:"):
        start = text.rfind("[", max(0, index - 46), index)
        if start != -1 and index + 2 < len(text) and text[index + 2].isdigit():
            yield start


def _find_internal_names(text: str, lowered: str) -> Iterator[int]:
    for found in _SUFFIX.finditer(lowered):
        yield _walk_back(text, found.start(), _HOST_CHARS, 255)


_DATABASE_SCHEMES = (
    "postgres", "postgresql", "mysql", "mariadb", "mongodb", "mongodb+srv", "redis", "rediss",
    "amqp", "amqps", "mssql", "sqlserver", "oracle", "cockroachdb",
)  # fmt: skip


def _find_schemes(text: str, lowered: str) -> Iterator[int]:
    for index in _find_all(text, "://"):
        yield _walk_back(text, index, _SCHEME_CHARS, 32)


def _find_database_schemes(text: str, lowered: str) -> Iterator[int]:
    for index in _find_all(lowered, "://"):
        if lowered.endswith(_DATABASE_SCHEMES, max(0, index - 11), index):
            yield _walk_back(text, index, _SCHEME_CHARS, 32)


def _find_url_credentials(text: str, lowered: str) -> Iterable[int]:
    return _find_schemes(text, lowered) if "@" in text else ()


def _find_connection_pairs(text: str, lowered: str) -> Iterable[int]:
    if ";" not in text or ("password" not in lowered and "pwd" not in lowered):
        return ()
    return _at("server", "data source", "host", "addr", lowered=True)(text, lowered)


# Order matters: whole blocks and connection strings first, so that narrower rules never see
# half a secret; host:port last, so that it never splits a connection string or a URL's
# credentials.
_RULES = (
    _Rule("private_key", _PRIVATE_KEY, _constant("private_key"), _at("-----BEGIN"), gate=("-----begin",)),
    _Rule(
        "connection_string", _CONNECTION_URL, _constant("connection_string"), _find_database_schemes, gate=("://",)
    ),
    _Rule("connection_string", _CONNECTION_PAIRS, _connection_pairs, _find_connection_pairs, gate=(";",)),
    _Rule("connection_string", _AZURE_KEY, _keep_prefix("connection_string"), _at(*_AZURE_KEY_NAMES, lowered=True),
          gate=_AZURE_KEY_NAMES),
    _Rule("webhook_url", _WEBHOOK_URL, _keep_prefix("webhook_url"), _find_webhook_urls, gate=_WEBHOOK_HOSTS),
    _Rule(
        "url_credentials",
        _URL_CREDENTIALS,
        lambda m: f"{m.group(1)}{_placeholder('url_credentials')}@",
        _find_url_credentials,
        gate=("@",),
    ),
    _Rule("url_credentials", _SIGNED_URL, _keep_prefix("url_credentials"), _find_signed_urls, gate=_SIGNED_URL_NAMES),
    _Rule("bearer_token", _AUTHORIZATION_HEADER, _authorization, _at("authorization", lowered=True),
          gate=("authorization",)),
    _Rule("bearer_token", _BEARER, _keep_prefix("bearer_token"), _at("bearer", lowered=True), gate=("bearer",)),
    _Rule("basic_auth", _BASIC, _basic, _heads(r"basic[ \t]+[a-z0-9+/]{6}"), gate=("basic",)),
    _Rule("session_cookie", _COOKIE_HEADER, _keep_prefix("session_cookie"),
          _heads(r"cookie[\"']?[ \t]*:", back="set-"), gate=("cookie",)),
    _Rule("session_cookie", _SESSION_ID, _pair("session_cookie"), _find_session_ids, spares_arns=True,
          gate=("sess", "connect.sid")),
    _Rule("jwt", _JWT, _constant("jwt"), _at("eyJ"), gate=("eyj",)),
    _Rule("aws_access_key", _AWS_ACCESS_KEY, _constant("aws_access_key"), _at("AKIA", "ASIA"), gate=("akia", "asia")),
    _Rule("api_key", _API_KEY, _constant("api_key"), _find_api_keys),
    _Rule("api_key", _TELEGRAM_BOT_TOKEN, _constant("api_key"), _find_telegram_tokens, gate=(":aa",)),
    _Rule("password", _MYSQL_PASSWORD, _keep_prefix("password"), _at("mysql", "mariadb", lowered=True),
          gate=("mysql", "mariadb")),
    _Rule("password", _PGPASS, _pgpass, _find_pgpass_lines, spares_arns=True, gate=(":",)),
    _Rule("password", _PASSWORD, _password, _find_passwords, spares_arns=True, gate=_SECRET_NAME_PARTS),
    _Rule("password", _PASSWORD_IS, _password_is, _heads(r"pass(?:word|wd|phrase|code)[ \t]+(?:is|was)[ \t:]"),
          gate=("pass",)),
    _Rule("internal_host", _HOST_PORT, _host_port, _find_host_ports, spares_arns=True, gate=(":",)),
    _Rule("internal_host", _INTERNAL_NAME, _internal_name, _find_internal_names, spares_arns=True,
          gate=_INTERNAL_SUFFIXES),
)  # fmt: skip


# An ARN (AWS docs, "Amazon Resource Names"): arn:partition:service:region:account:resource.
_ARN = re.compile(r"arn:aws(?:-[a-z]+)*:[a-z0-9-]+:[a-z0-9-]*:(?:[0-9]{12}|aws)?:[^\s'\"<>,;]+")


def _arn_spans(text: str) -> list[tuple[int, int]]:
    return [found.span() for found in _ARN.finditer(text)] if "arn:aws" in text else []


def _apply(rule: _Rule, text: str, lowered: str) -> str:
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


def redact(text: str) -> Redacted:
    """Replace every secret in `text` with `[REDACTED:<kind>]`; `kinds` is sorted and unique."""
    if not text:
        return Redacted(text, ())
    found: set[str] = set()
    lowered = _lower(text)
    for rule in _RULES:
        for name in rule.gate:  # a loop, not any(): this runs ~20 times per text
            if name in lowered:
                break
        else:
            if rule.gate:
                continue
        new_text = _apply(rule, text, lowered)
        if new_text != text:
            found.add(rule.kind)
            text = new_text
            lowered = _lower(text)
    return Redacted(text, tuple(sorted(found)))


def _lower(text: str) -> str:
    """`text.lower()`, position for position (a few characters grow when lower-cased)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


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
_PAIR_NAME_PARTS = _SECRET_NAME_PARTS + _SESSION_ID_PARTS
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PAIR_RULES = (_PASSWORD, _SESSION_ID)


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
            return _placeholder("key_name")
        if isinstance(child, str | int | float) and not isinstance(child, bool) and self.may_pair(key):
            shown = child if isinstance(child, str) else json.dumps(child)
            pair = f"{key}={json.dumps(shown, ensure_ascii=False)}"
            for pattern in _PAIR_RULES:
                match = pattern.search(pair)
                if match is not None and match.end(1) == len(key) + 1:
                    kind = "session_cookie" if pattern is _SESSION_ID else "password"
                    if _is_status(shown) or (_BARE_PASS.search(match.group(1)) and _is_ordinary_word(shown)):
                        break
                    self.found.add(kind)
                    self.hits += 1
                    return _placeholder(kind)
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
