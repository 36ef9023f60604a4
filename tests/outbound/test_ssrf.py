"""The SSRF guard: only public http(s) targets, names resolved, every address checked."""

from __future__ import annotations

import socket

import pytest

from outbound.ssrf import UnsafeTarget, url_check
from tests.webhooks.conftest import fake_resolver


@pytest.fixture(autouse=True)
def private_off(settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def use(mapping: dict[str, list[str]]) -> None:
        monkeypatch.setattr(socket, "getaddrinfo", fake_resolver(mapping))

    return use


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/hook",
        "http://127.0.0.1/hook",
        "http://127.1.2.3:8080/hook",
        "http://10.0.0.1/hook",
        "http://172.16.5.4/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",
        "http://[::1]/hook",
        "http://[fd00::1]/hook",
        "http://[fe80::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[64:ff9b::a00:1]/hook",
        "http://2130706433/hook",
    ],
)
def test_it_refuses_loopback_private_link_local_and_ula_targets(url: str) -> None:
    with pytest.raises(UnsafeTarget):
        url_check(url)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/",
        "file:///etc/passwd",
        "gopher://hooks.example.com/",
        "javascript:alert(1)",
        "https://user:pass@hooks.example.com/",
        "not a url",
        "https:///path-only",
    ],
)
def test_it_refuses_other_schemes_credentials_and_broken_urls(url: str, dns) -> None:  # type: ignore[no-untyped-def]
    dns({"hooks.example.com": ["93.184.216.34"]})
    with pytest.raises(UnsafeTarget):
        url_check(url)


def test_a_name_resolving_to_loopback_is_refused(dns) -> None:  # type: ignore[no-untyped-def]
    dns({"hooks.example.com": ["127.0.0.1"]})
    with pytest.raises(UnsafeTarget, match="loopback"):
        url_check("https://hooks.example.com/holdpoint")


def test_every_resolved_address_is_checked_not_only_the_first(dns) -> None:  # type: ignore[no-untyped-def]
    dns({"hooks.example.com": ["93.184.216.34", "10.1.2.3"]})
    with pytest.raises(UnsafeTarget, match="private"):
        url_check("https://hooks.example.com/holdpoint")


def test_a_name_that_does_not_resolve_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise socket.gaierror("Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    with pytest.raises(UnsafeTarget, match="does not resolve"):
        url_check("https://nowhere.invalid/")


def test_a_public_name_is_accepted_and_its_addresses_kept_for_the_connection(dns) -> None:  # type: ignore[no-untyped-def]
    dns({"hooks.example.com": ["93.184.216.34", "2606:2800:220:1::1"]})
    target = url_check("https://hooks.example.com:8443/holdpoint?x=1")
    assert target.addresses == ("93.184.216.34", "2606:2800:220:1::1")
    assert target.authority == "hooks.example.com:8443"
    assert str(target.pinned_url("2606:2800:220:1::1")) == "https://[2606:2800:220:1::1]:8443/holdpoint?x=1"
    assert target.extensions == {"sni_hostname": "hooks.example.com"}


def test_the_setting_is_read_at_call_time(settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsafeTarget):
        url_check("http://127.0.0.1:9/hook")
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    assert url_check("http://127.0.0.1:9/hook").addresses == ("127.0.0.1",)
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(UnsafeTarget):
        url_check("http://127.0.0.1:9/hook")


def test_allowing_private_targets_keeps_the_scheme_rule(settings) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(UnsafeTarget):
        url_check("file:///etc/passwd")
