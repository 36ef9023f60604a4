"""Where an outbound POST may go (webhooks, Slack and webhook notifications): public http(s)
addresses only (contract §5).

A URL is checked when an endpoint is registered and again before every try: the name is
resolved and EVERY address it resolves to must be public, and the try then connects to one of
those vetted addresses (the Host header and TLS SNI keep the name), so a DNS answer that
changes between the check and the connection (rebinding) cannot reach an internal service.
`HOLDPOINT_WEBHOOK_ALLOW_PRIVATE` (read at each call) lifts the address rule, for
development and tests with local receivers; the scheme and credential rules stay.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

SCHEMES = ("http", "https")
MAX_URL_LENGTH = 2000
NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UnsafeTarget(ValueError):
    """A webhook URL that may not be used; the message says why (never the whole URL)."""


def private_targets_allowed() -> bool:
    return bool(settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE)


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), if any."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(ip: IPAddress) -> str | None:
    """Why this address may not receive webhooks, or None when it is a public unicast one."""
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        reason = address_refusal(embedded)
        if reason:
            return reason
    for reason, flag in (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    ):
        if flag:
            return reason
    if not ip.is_global:
        return "not public"
    return None


@dataclass(frozen=True)
class Target:
    """A checked URL and the addresses a try may connect to."""

    url: httpx.URL
    addresses: tuple[str, ...]

    @property
    def authority(self) -> str:
        """The Host header: the name (and port) the URL was written with."""
        return self.url.netloc.decode("ascii")

    def pinned_url(self, address: str) -> httpx.URL:
        return self.url.copy_with(host=address)

    @property
    def extensions(self) -> dict[str, Any]:
        # TLS is checked against the name, although the connection goes to the address.
        return {"sni_hostname": self.url.host} if self.url.scheme == "https" else {}


def url_parse(url: str) -> httpx.URL:
    """The URL, if its form is acceptable (scheme, host, no credentials); no DNS."""
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeTarget(f"the URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, UnicodeError, TypeError) as error:
        raise UnsafeTarget("the URL cannot be parsed") from error
    if parsed.scheme not in SCHEMES:
        raise UnsafeTarget("only http and https URLs are allowed")
    if not parsed.host:
        raise UnsafeTarget("the URL has no host")
    if parsed.userinfo:
        raise UnsafeTarget("credentials in the URL are not allowed; the signature authenticates")
    return parsed


def _resolve(host: str, port: int) -> list[str]:
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as error:
        raise UnsafeTarget(f"the host {host} does not resolve") from error
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in answers:
        address = str(sockaddr[0]).split("%", 1)[0]  # drop an IPv6 zone
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise UnsafeTarget(f"the host {host} does not resolve")
    return addresses


def url_check(url: str) -> Target:
    """Parse, resolve and vet a webhook URL; raises UnsafeTarget. Call it at registration
    and again right before each try (DNS answers change)."""
    parsed = url_parse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    addresses = _resolve(parsed.host, port)
    if not private_targets_allowed():
        for address in addresses:
            reason = address_refusal(ipaddress.ip_address(address))
            if reason:
                raise UnsafeTarget(
                    f"{parsed.host} resolves to a {reason} address ({address}); webhooks go to public addresses only"
                )
    return Target(url=parsed, addresses=tuple(addresses))
