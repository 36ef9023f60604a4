"""Secrets in untrusted text: keys and tokens known by their vendor's prefix, credentials in URLs,
headers and connection strings, private keys, `name: value` pairs whose name says secret, and
internal hosts (`hosts`). `redact` runs every rule over a text, in order."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Iterable, Iterator

from .hosts import HOST_RULES
from .rules import (
    NOT_PLACEHOLDER,
    Redacted,
    Replacement,
    Rule,
    apply_rule,
    at,
    constant,
    find_all,
    heads,
    keep_prefix,
    lower_in_place,
    placeholder,
    walk_back,
)

# Every kind a placeholder names; `api_key` is any key or token known by its vendor's prefix, and
# `key_name` a value replaced whole because its key names a credential (contract §4).
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
        return placeholder("connection_string")
    return match.group(0)


# Azure storage / Service Bus / Event Hubs connection strings: the key's value goes, the account
# and endpoint names stay (noseyparker np.azure.1, "Azure Connection String").
_AZURE_KEY_NAMES = ("accountkey", "sharedaccesskey", "sharedsecretvalue")
_AZURE_KEY = re.compile(
    r"((?:AccountKey|SharedAccessKey|SharedSecretValue)[ \t]*=[ \t]*)" + NOT_PLACEHOLDER + r"[A-Za-z0-9/+]{20,}={0,3}",
    re.IGNORECASE,
)

# A signed URL's signature grants what the URL names to whoever holds it: Azure SAS `sig=`
# (trufflehog azuresastoken, microsoftteamswebhook v2), AWS and GCS presigned URLs.
_SIGNED_URL = re.compile(
    r"((?:sig|x-amz-signature|x-amz-security-token|x-goog-signature)=)"
    + NOT_PLACEHOLDER
    + r"(?:[A-Za-z0-9+/_.-]|%[0-9A-Fa-f]{2}){10,}={0,2}",
    re.IGNORECASE,
)
_SIGNED_URL_NAMES = ("sig=", "x-amz-signature=", "x-amz-security-token=", "x-goog-signature=")


def _find_signed_urls(text: str, lowered: str) -> Iterator[int]:
    """Each name at a query or pair boundary (`?sig=`, `&sig=`, ` sig=`), never inside a word."""
    for name in _SIGNED_URL_NAMES:
        for index in find_all(lowered, name):
            if index == 0 or lowered[index - 1] in "?&; \t\n\"'":
                yield index


# `mysql -u app -pS3cret shop`: the password is glued to `-p` (`-p` alone prompts, and `-P` is the
# port); `--password=` is a pair the password rule takes.
_MYSQL_PASSWORD = re.compile(
    r"((?<![A-Za-z0-9_])(?i:mysql|mariadb)[a-z-]*(?:[ \t]+\S+){0,30}?[ \t]+-p)"
    + NOT_PLACEHOLDER
    + r"(?:'[^'\r\n]*'|\"[^\"\r\n]*\"|[^\s'\"]+)"
)

# A .pgpass line, `host:port:database:user:password` (PostgreSQL docs, "The Password File"): the
# password goes. The host holds a letter or a dot, so that `00:11:22:33:44:55` is no such line.
_PGPASS = re.compile(
    r"(?<![^\s'\"`])((?:[A-Za-z0-9_.-]*[A-Za-z.][A-Za-z0-9_.-]*|\*|\[[0-9A-Fa-f:.]+\])"
    r":(?:[0-9]{1,5}|\*):[^:\s'\"]+:[^:\s'\"]+:)" + NOT_PLACEHOLDER + r"[^\s'\"]+"
)
_PGPASS_FIELDS = re.compile(r":(?:[0-9]{1,5}|\*):[^:\s'\"]+:[^:\s'\"]+:")
_PGPASS_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-*[]:")


def _find_pgpass_lines(text: str, lowered: str) -> Iterator[int]:
    if text.count(":") < 4:
        return
    for found in _PGPASS_FIELDS.finditer(text):
        yield walk_back(text, found.start(), _PGPASS_HOST_CHARS, 255)


def _pgpass(match: re.Match[str]) -> str:
    try:
        ipaddress.ip_address(match.group(0))  # an IPv6 address reads like one too
    except ValueError:
        return match.group(1) + placeholder("password")
    return match.group(0)


# scheme://user:password@host keeps the scheme and the host. The greedy password part backtracks
# to the last `@` of the authority, so a password containing `@` does not leak its tail; it may
# also hold a raw `?` or `#` (invalid, but a secret all the same).
_URL_CREDENTIALS = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@:'\"<>]*:[^\s/'\"<>]*@")

_AUTHORIZATION_HEADER = re.compile(
    r"(?<![A-Za-z0-9])(authorization[\"']?[ \t]*[:=][ \t]*[\"']?)" + NOT_PLACEHOLDER + r"[^\r\n\"']+",
    re.IGNORECASE,
)


def _authorization(match: re.Match[str]) -> str:
    if is_status(match.group(0)[match.end(1) - match.start() :].strip()):
        return match.group(0)  # "Authorization: missing"
    return match.group(1) + placeholder("bearer_token")


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
    r"|hv[sbr]\.[A-Za-z0-9_-]{24,}"  # Vault service/batch/recovery tokens (Vault docs "Tokens"; trufflehog)
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
    yield from find_all(text, "AIza")


# Telegram bot tokens, `<bot id>:AA<33 characters>`, also inside `api.telegram.org/bot<token>/`
# (noseyparker np.telegram.1).
_TELEGRAM_BOT_TOKEN = re.compile(r"(?<![0-9])[0-9]{5,16}:AA[A-Za-z0-9_-]{32,}")
_DIGITS = frozenset("0123456789")


def _find_telegram_tokens(text: str, lowered: str) -> Iterator[int]:
    for index in find_all(text, ":AA"):
        yield walk_back(text, index, _DIGITS, 16)


# The value of a `name: value` pair: a quoted string (quotes kept, so JSON-ish text still reads
# as JSON) or a run up to a separator.
_PAIR_VALUE = r"(?:\"((?:[^\"\\\r\n]|\\.)+)\"|'([^'\r\n]+)'|([^\s&;,\"'<>(){}\[\]]+))"

# `password=...`, `db_password: ...`, `"client_secret": "..."`, `X-Api-Key: ...`, `pass: ...`: the
# name and the separator stay, the value goes. A bare `pass` must be a word of its own (not
# `bypass:`), and an ordinary word after it stays (`pass: true`).
PASSWORD = re.compile(
    r"([A-Za-z0-9_.-]{0,40}?(?:password|passwd|pwd|passphrase|secret(?:[_-]?(?:access[_-]?)?key)?"
    r"|token|api[_-]?key|apikey|(?:access|private|signing|account|encryption|master)[_-]?key|cred(?:ential)?s?"
    r"|(?<![A-Za-z])pass(?![A-Za-z]))"
    r"[\"']?[ \t]*[:=][ \t]*)" + NOT_PLACEHOLDER + _PAIR_VALUE,
    re.IGNORECASE,
)
SECRET_NAME_PARTS = ("pass", "pwd", "secret", "token", "key", "cred")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_THEN_SEPARATOR = re.compile(r"[a-z0-9_.-]*[\"']?[ \t]*[:=]")


def _find_passwords(text: str, lowered: str) -> Iterator[int]:
    """The start of every word that contains a part of a secret's name and ends in `:` or `=`."""
    for part in SECRET_NAME_PARTS:
        for index in find_all(lowered, part):
            if _NAME_THEN_SEPARATOR.match(lowered, index + len(part)):
                yield walk_back(lowered, index, _NAME_CHARS, 40)


def _pair(kind: str) -> Replacement:
    """The value of a `name: value` pair redacted, unless it states a condition (`is_status`)."""

    def replace(match: re.Match[str]) -> str:
        if is_status(match.group(2) or match.group(3) or match.group(4)):
            return match.group(0)
        if match.group(2) is not None:
            return f'{match.group(1)}"{placeholder(kind)}"'
        if match.group(3) is not None:
            return f"{match.group(1)}'{placeholder(kind)}'"
        return match.group(1) + placeholder(kind)

    return replace


BARE_PASS = re.compile(r"(?<![a-z])pass[\"']?[ \t]*[:=][ \t]*\Z", re.IGNORECASE)
_password_pair = _pair("password")


def _password(match: re.Match[str]) -> str:
    value = match.group(2) or match.group(3) or match.group(4)
    if BARE_PASS.search(match.group(1)) and is_ordinary_word(value):
        return match.group(0)  # "pass: true", "pass: none": a word, not a secret
    return _password_pair(match)


# Words that follow "password is" or "pass:" in prose and in logs, never a secret worth the name:
# "the password is incorrect", "pass: true". Anything else after those words is redacted.
ORDINARY_WORDS = frozenset(
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


def is_ordinary_word(value: str) -> bool:
    word = value.lower()
    if not (word.isascii() and word.isalpha()):
        return False
    return word in ORDINARY_WORDS or (len(word) > 4 and word.endswith(_PROSE_SUFFIXES))


_STATUS_PARTS = re.compile(r"[ _-]")
_MASK_CHARS = frozenset("*\u2022")


def is_status(value: str) -> bool:
    """Whether the value after a secret's name states a condition instead of holding the secret:
    `password: required`, `token: expired`, `credentials: invalid`, `"secret": "not set"`,
    `api_key: NOT_SET`, `password: ****`. The rule: one to four words, each from the closed list
    `ORDINARY_WORDS`, in any case, joined by spaces, `_` or `-`; or a mask of `*` or `•`. No
    length, entropy or charset test: a short or all-letter value (`hunter`, `letmein`) may be the
    password itself, so anything outside the list is redacted. Hiding `required` would hide the
    very error a reviewer needs; a password that is literally `required` is no secret worth it."""
    if not value or len(value) > 40:
        return False
    if set(value) <= _MASK_CHARS:
        return True
    parts = _STATUS_PARTS.split(value.lower())
    return len(parts) <= 4 and all(part in ORDINARY_WORDS for part in parts)


# "the password is hunter2", "your new passphrase was 'correct horse'": prose that states one.
# Trailing sentence punctuation stays outside the value; an ordinary word stays as it is
# ("the password is incorrect", "password reset email sent" has no "is" at all).
_PASSWORD_IS = re.compile(
    r"(?<![A-Za-z0-9_-])((?:password|passwd|passphrase|passcode)[ \t]+(?:is|was)[ \t]*:?[ \t]+)"
    + NOT_PLACEHOLDER
    + r"(?:\"((?:[^\"\\\r\n]|\\.)+)\"|'([^'\r\n]+)'|([^\s\"'<>]+?))(?=[.,;:)]*(?:\s|\Z))",
    re.IGNORECASE,
)


def _password_is(match: re.Match[str]) -> str:
    if match.group(4) is not None and is_ordinary_word(match.group(4)):
        return match.group(0)
    return _password_pair(match)


# Session cookies and the Cookie header: whoever holds one is logged in as its owner. The header's
# whole value goes (it holds every cookie of the site), but only when it holds a `name=value`, so
# that "cookie: disabled" stays.
_COOKIE_HEADER = re.compile(
    r"(?<![A-Za-z0-9_-])((?:set-)?cookie[\"']?[ \t]*:[ \t]*[\"']?)" + NOT_PLACEHOLDER + r"(?=[^\r\n\"']*=)[^\r\n\"']+",
    re.IGNORECASE,
)
SESSION_ID = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]{0,30}?(?:session[_.-]?id|sessid|connect\.sid)"
    r"[\"']?[ \t]*[:=][ \t]*)" + NOT_PLACEHOLDER + _PAIR_VALUE,
    re.IGNORECASE,
)
SESSION_ID_PARTS = ("session", "sessid", "connect.sid")
_SESSION_ID_THEN_SEPARATOR = re.compile(r"(?:session[_.-]?id|sessid|connect\.sid)[\"']?[ \t]*[:=]")


def _find_session_ids(text: str, lowered: str) -> Iterator[int]:
    for part in SESSION_ID_PARTS:
        for index in find_all(lowered, part):
            if _SESSION_ID_THEN_SEPARATOR.match(lowered, index):
                yield walk_back(lowered, index, _NAME_CHARS, 30)


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
        return match.group(1) + placeholder("basic_auth")
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
    for index in (i for host in _WEBHOOK_HOSTS for i in find_all(lowered, host)):
        start = walk_back(lowered, index, _LOWER_HOST_CHARS, 20)
        for scheme in ("https://", "http://"):
            if lowered.endswith(scheme, 0, start):
                yield start - len(scheme)
        yield start


_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-+")
_DATABASE_SCHEMES = (
    "postgres", "postgresql", "mysql", "mariadb", "mongodb", "mongodb+srv", "redis", "rediss",
    "amqp", "amqps", "mssql", "sqlserver", "oracle", "cockroachdb",
)  # fmt: skip


def _find_schemes(text: str, lowered: str) -> Iterator[int]:
    for index in find_all(text, "://"):
        yield walk_back(text, index, _SCHEME_CHARS, 32)


def _find_database_schemes(text: str, lowered: str) -> Iterator[int]:
    for index in find_all(lowered, "://"):
        if lowered.endswith(_DATABASE_SCHEMES, max(0, index - 11), index):
            yield walk_back(text, index, _SCHEME_CHARS, 32)


def _find_url_credentials(text: str, lowered: str) -> Iterable[int]:
    return _find_schemes(text, lowered) if "@" in text else ()


def _find_connection_pairs(text: str, lowered: str) -> Iterable[int]:
    if ";" not in text or ("password" not in lowered and "pwd" not in lowered):
        return ()
    return at("server", "data source", "host", "addr", lowered=True)(text, lowered)


# Order matters: whole blocks and connection strings first, so that narrower rules never see
# half a secret; host:port last, so that it never splits a connection string or a URL's
# credentials.
_RULES = (
    Rule("private_key", _PRIVATE_KEY, constant("private_key"), at("-----BEGIN"), gate=("-----begin",)),
    Rule("connection_string", _CONNECTION_URL, constant("connection_string"), _find_database_schemes, gate=("://",)),
    Rule("connection_string", _CONNECTION_PAIRS, _connection_pairs, _find_connection_pairs, gate=(";",)),
    Rule(
        "connection_string",
        _AZURE_KEY,
        keep_prefix("connection_string"),
        at(*_AZURE_KEY_NAMES, lowered=True),
        gate=_AZURE_KEY_NAMES,
        needs="=",
    ),
    Rule("webhook_url", _WEBHOOK_URL, keep_prefix("webhook_url"), _find_webhook_urls, gate=_WEBHOOK_HOSTS, needs="/"),
    Rule(
        "url_credentials",
        _URL_CREDENTIALS,
        lambda m: f"{m.group(1)}{placeholder('url_credentials')}@",
        _find_url_credentials,
        gate=("@",),
    ),
    Rule(
        "url_credentials",
        _SIGNED_URL,
        keep_prefix("url_credentials"),
        _find_signed_urls,
        gate=_SIGNED_URL_NAMES,
        needs="=",
    ),
    Rule(
        "bearer_token",
        _AUTHORIZATION_HEADER,
        _authorization,
        at("authorization", lowered=True),
        gate=("authorization",),
    ),
    Rule("bearer_token", _BEARER, keep_prefix("bearer_token"), at("bearer", lowered=True), gate=("bearer",)),
    Rule("basic_auth", _BASIC, _basic, heads(r"basic[ \t]+[a-z0-9+/]{6}"), gate=("basic",)),
    Rule(
        "session_cookie",
        _COOKIE_HEADER,
        keep_prefix("session_cookie"),
        heads(r"cookie[\"']?[ \t]*:", back="set-"),
        gate=("cookie",),
    ),
    Rule(
        "session_cookie",
        SESSION_ID,
        _pair("session_cookie"),
        _find_session_ids,
        spares_arns=True,
        gate=("sess", "connect.sid"),
    ),
    Rule("jwt", _JWT, constant("jwt"), at("eyJ"), gate=("eyj",)),
    Rule("aws_access_key", _AWS_ACCESS_KEY, constant("aws_access_key"), at("AKIA", "ASIA"), gate=("akia", "asia")),
    Rule("api_key", _API_KEY, constant("api_key"), _find_api_keys),
    Rule("api_key", _TELEGRAM_BOT_TOKEN, constant("api_key"), _find_telegram_tokens, gate=(":aa",)),
    Rule(
        "password",
        _MYSQL_PASSWORD,
        keep_prefix("password"),
        at("mysql", "mariadb", lowered=True),
        gate=("mysql", "mariadb"),
    ),
    Rule("password", _PGPASS, _pgpass, _find_pgpass_lines, spares_arns=True, gate=(":",)),
    Rule("password", PASSWORD, _password, _find_passwords, spares_arns=True, gate=SECRET_NAME_PARTS),
    Rule(
        "password",
        _PASSWORD_IS,
        _password_is,
        heads(r"pass(?:word|wd|phrase|code)[ \t]+(?:is|was)[ \t:]"),
        gate=("pass",),
    ),
    *HOST_RULES,
)


def redact(text: str) -> Redacted:
    """Replace every secret in `text` with `[REDACTED:<kind>]`; `kinds` is sorted and unique."""
    if not text:
        return Redacted(text, ())
    found: set[str] = set()
    lowered = lower_in_place(text)
    for rule in _RULES:
        if rule.needs and rule.needs not in text:
            continue
        for name in rule.gate:  # a loop, not any(): this runs ~20 times per text
            if name in lowered:
                break
        else:
            if rule.gate:
                continue
        new_text = apply_rule(rule, text, lowered)
        if new_text != text:
            found.add(rule.kind)
            text = new_text
            lowered = lower_in_place(text)
    return Redacted(text, tuple(sorted(found)))
