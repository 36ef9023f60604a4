"""`manage.py createwebhook --team SLUG --url URL` (contract §8)."""

from __future__ import annotations

import io
import socket
import time

import pytest
from django.core.management import CommandError, call_command
from standardwebhooks.webhooks import Webhook

from accounts.models import Team
from outbound.signing import signed_headers
from webhooks.models import WebhookEndpoint

from .conftest import fake_resolver


def run(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("createwebhook", *args, stdout=out)
    return out.getvalue().splitlines()


def test_it_prints_the_secret_alone_on_the_last_line(
    team: Team,
    settings,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver({"hooks.example.com": ["93.184.216.34"]}))
    lines = run("--team", "acme", "--url", "https://hooks.example.com/holdpoint")
    secret = lines[-1]
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.team, endpoint.url, endpoint.active) == (
        team,
        "https://hooks.example.com/holdpoint",
        True,
    )
    assert secret == endpoint.secret and secret.startswith("whsec_")
    body = b'{"type":"x","timestamp":"t","data":{}}'
    headers = signed_headers(secret=secret, message_id="m", timestamp=int(time.time()), body=body)
    assert Webhook(secret).verify(body, headers)


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8000/hook",
        "http://127.0.0.1/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[fd00::1]/hook",
        "ftp://hooks.example.com/",
        "not-a-url",
    ],
)
def test_it_refuses_bad_urls_with_a_non_zero_exit(team: Team, settings, url: str) -> None:  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(CommandError, match="Refused"):
        run("--team", "acme", "--url", url)
    assert not WebhookEndpoint.objects.exists()


def test_an_unknown_team_is_an_error(db) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="No team"):
        run("--team", "nobody", "--url", "https://hooks.example.com/")


def test_private_urls_are_accepted_when_the_setting_allows_them(team: Team, allow_private: None) -> None:
    assert run("--team", "acme", "--url", "http://127.0.0.1:8001/hook")[-1].startswith("whsec_")
