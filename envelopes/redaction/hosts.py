"""Internal hosts in untrusted text: `host:port` of a private address or a service-like name, and
names under internal suffixes (`.internal`, `.local`, `.corp`...), but not files named like them."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from .rules import Rule, find_all, placeholder, walk_back

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
    return placeholder("internal_host")


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
        return placeholder("internal_host")
    return match.group(0)


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")


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
    for index in find_all(text, "]:"):
        start = text.rfind("[", max(0, index - 46), index)
        if start != -1 and index + 2 < len(text) and text[index + 2].isdigit():
            yield start


def _find_internal_names(text: str, lowered: str) -> Iterator[int]:
    for found in _SUFFIX.finditer(lowered):
        yield walk_back(text, found.start(), _HOST_CHARS, 255)


# Last among the text rules (after every secret rule), so that a host never splits a connection
# string or a URL's credentials.
HOST_RULES = (
    Rule("internal_host", _HOST_PORT, _host_port, _find_host_ports, spares_arns=True, gate=(":",)),
    Rule(
        "internal_host", _INTERNAL_NAME, _internal_name, _find_internal_names, spares_arns=True, gate=_INTERNAL_SUFFIXES
    ),
)
