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

import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "Redacted", "looks_like_instruction", "redact", "redact_json"]

KINDS = (
    "private_key",
    "connection_string",
    "url_credentials",
    "bearer_token",
    "jwt",
    "aws_access_key",
    "api_key",
    "password",
    "internal_host",
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


# scheme://user:password@host keeps the scheme and the host. The greedy password part backtracks
# to the last `@` of the authority, so a password containing `@` does not leak its tail; it may
# also hold a raw `?` or `#` (invalid, but a secret all the same).
_URL_CREDENTIALS = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@:'\"<>]*:[^\s/'\"<>]*@")

_AUTHORIZATION_HEADER = re.compile(
    r"(?<![A-Za-z0-9])(authorization[\"']?[ \t]*[:=][ \t]*[\"']?)" + _NOT_PLACEHOLDER + r"[^\r\n\"']+",
    re.IGNORECASE,
)
# The token must look like one (a digit or a symbol, or long), so that prose such as "the Bearer
# token expired" survives.
_BEARER = re.compile(
    r"(?<![A-Za-z0-9])(bearer\s+)(?:(?=[A-Za-z]*[0-9\-._~+/])[A-Za-z0-9\-._~+/]{4,}|[A-Za-z]{20,})=*",
    re.IGNORECASE,
)

_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*")

_AWS_ACCESS_KEY = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}")

_API_KEY = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-[A-Za-z0-9_-]{12,}"  # OpenAI, Anthropic
    r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}"  # Stripe
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|xox[bpaors]-[A-Za-z0-9-]{8,}"  # Slack
    r"|hp_[A-Za-z0-9_-]{16,}"  # Holdpoint API keys ("hp_" + token_urlsafe)
    r"|whsec_[A-Za-z0-9+/=]{16,}"  # Holdpoint / Standard Webhooks signing secrets
    r"|AIza[A-Za-z0-9_-]{30,}"  # Google
    r"|glpat-[A-Za-z0-9_-]{16,}|npm_[A-Za-z0-9]{30,}"  # GitLab, npm
    r")"
)
# Every prefix but Google's ends with `_` or `-`: those few characters are the anchors.
_API_KEY_PREFIXES = (
    "sk-", "sk_", "pk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hp_",
    "whsec_", "glpat-", "npm_", *(f"xox{c}-" for c in "bpaors"),
)  # fmt: skip


# Searched in the reversed text, where every prefix starts with a literal `_` or `-`.
_REVERSED_API_KEY_PREFIXES = tuple(
    re.compile(
        re.escape(separator)
        + "(?:"
        + "|".join(re.escape(p[-2::-1]) for p in _API_KEY_PREFIXES if p.endswith(separator))
        + ")"
    )
    for separator in ("_", "-")
)


def _find_api_keys(text: str, lowered: str) -> Iterator[int]:
    if "_" in text or "-" in text:
        reversed_text, last = text[::-1], len(text) - 1
        for pattern in _REVERSED_API_KEY_PREFIXES:
            for found in pattern.finditer(reversed_text):
                yield last - found.end() + 1
    yield from _find_all(text, "AIza")


# `password=...`, `db_password: ...`, `"client_secret": "..."`, `X-Api-Key: ...`: the name and the
# separator stay, the value goes (quotes kept, so JSON-ish text still reads as JSON).
_PASSWORD = re.compile(
    r"([A-Za-z0-9_.-]{0,40}?(?:password|passwd|pwd|passphrase|secret(?:[_-]?(?:access[_-]?)?key)?"
    r"|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?)"
    r"[\"']?[ \t]*[:=][ \t]*)"
    + _NOT_PLACEHOLDER
    + r"(?:\"((?:[^\"\\\r\n]|\\.)+)\"|'([^'\r\n]+)'|([^\s&;,\"'<>(){}\[\]]+))",
    re.IGNORECASE,
)
_SECRET_NAME_PARTS = ("pass", "pwd", "secret", "token", "key", "credential")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_THEN_SEPARATOR = re.compile(r"[a-z0-9_.-]*[\"']?[ \t]*[:=]")


def _find_passwords(text: str, lowered: str) -> Iterator[int]:
    """The start of every word that contains a part of a secret's name and ends in `:` or `=`."""
    for part in _SECRET_NAME_PARTS:
        for index in _find_all(lowered, part):
            if _NAME_THEN_SEPARATOR.match(lowered, index + len(part)):
                yield _walk_back(lowered, index, _NAME_CHARS, 40)


def _password(match: re.Match[str]) -> str:
    if match.group(2) is not None:
        return f'{match.group(1)}"{_placeholder("password")}"'
    if match.group(3) is not None:
        return f"{match.group(1)}'{_placeholder('password')}'"
    return match.group(1) + _placeholder("password")


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
    _Rule("private_key", _PRIVATE_KEY, _constant("private_key"), _at("-----BEGIN")),
    _Rule(
        "connection_string",
        _CONNECTION_URL,
        _constant("connection_string"),
        _find_database_schemes,
    ),
    _Rule("connection_string", _CONNECTION_PAIRS, _connection_pairs, _find_connection_pairs),
    _Rule(
        "url_credentials",
        _URL_CREDENTIALS,
        lambda m: f"{m.group(1)}{_placeholder('url_credentials')}@",
        _find_url_credentials,
    ),
    _Rule(
        "bearer_token",
        _AUTHORIZATION_HEADER,
        _keep_prefix("bearer_token"),
        _at("authorization", lowered=True),
    ),
    _Rule("bearer_token", _BEARER, _keep_prefix("bearer_token"), _at("bearer", lowered=True)),
    _Rule("jwt", _JWT, _constant("jwt"), _at("eyJ")),
    _Rule("aws_access_key", _AWS_ACCESS_KEY, _constant("aws_access_key"), _at("AKIA", "ASIA")),
    _Rule("api_key", _API_KEY, _constant("api_key"), _find_api_keys),
    _Rule("password", _PASSWORD, _password, _find_passwords),
    _Rule("internal_host", _HOST_PORT, _host_port, _find_host_ports),
    _Rule("internal_host", _INTERNAL_NAME, _constant("internal_host"), _find_internal_names),
)


def _apply(rule: _Rule, text: str, lowered: str) -> str:
    """Like `rule.pattern.sub`, but only trying the positions the rule's finder names: the
    patterns' lookbehinds make every other position fail anyway."""
    starts = sorted(set(rule.finder(text, lowered)))
    if not starts:
        return text
    pieces: list[str] = []
    done = 0  # text[:done] is settled: copied to `pieces` or replaced
    for start in starts:
        if start < done:
            continue
        match = rule.pattern.match(text, start)
        if match is None or not match.group(0):
            continue
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


def redact_json(value: Any) -> tuple[Any, tuple[str, ...]]:
    """Redact every string in a JSON value (object keys untouched); return it and the kinds."""
    found: set[str] = set()

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            result = redact(item)
            found.update(result.kinds)
            return result.text
        if isinstance(item, dict):
            return {key: walk(child) for key, child in item.items()}
        if isinstance(item, list | tuple):
            return [walk(child) for child in item]
        return item

    redacted = walk(value)
    return redacted, tuple(sorted(found))


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
