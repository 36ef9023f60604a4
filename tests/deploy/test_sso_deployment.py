"""Contract §8 and §12: single sign-on needs its settings and `migrate`, nothing else. A fresh
database, `migrate`, gunicorn with OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET (and
password sign-in off, sessions of an hour), then a sign-in through the real test provider."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.deploy.deployment import base_environment, drop_database, fresh_database_url, gunicorn, manage
from tests.oidc_provider.harness import CLIENT_ID, CLIENT_SECRET, OidcProvider, ProviderBrowser, oidc_provider

__all__ = ["oidc_provider"]


def test_migrate_then_gunicorn_signs_a_reviewer_in_with_the_provider(
    tmp_path: Path, oidc_provider: OidcProvider
) -> None:
    database_url, created = fresh_database_url(tmp_path)
    try:
        env = base_environment(
            database_url,
            HOLDPOINT_HTTPS="false",
            OIDC_ISSUER=oidc_provider.issuer,
            OIDC_CLIENT_ID=CLIENT_ID,
            OIDC_CLIENT_SECRET=CLIENT_SECRET,
            HOLDPOINT_OIDC_PROVIDER_NAME="Test IdP",
            HOLDPOINT_PASSWORD_LOGIN="false",
            HOLDPOINT_SESSION_AGE_S="3600",
        )
        manage(env, "migrate", "--noinput")
        manage(env, "createteam", "acme")
        oidc_provider.set_groups("alice", ["holdpoint:acme:admin"])

        with gunicorn(env) as url, httpx.Client(base_url=url) as holdpoint:
            oidc_provider.allow_redirect_uri(f"{url}/oidc/callback/")
            login = holdpoint.get("/accounts/login/")
            assert login.status_code == 200
            assert "Sign in with Test IdP" in login.text and 'name="password"' not in login.text

            start = holdpoint.get("/oidc/authenticate/")
            assert start.status_code == 302 and start.headers["location"].startswith(oidc_provider.issuer)
            callback = urlsplit(ProviderBrowser("alice").authorize(start.headers["location"]))
            signed_in = holdpoint.get(f"{callback.path}?{callback.query}")

            assert signed_in.status_code == 302 and signed_in.headers["location"] == "/", signed_in.text
            assert re.search(r"sessionid=[^;]+;.*Max-Age=3600", signed_in.headers["set-cookie"])
            queues = holdpoint.get("/")
            assert queues.status_code == 200 and "Review queues" in queues.text
            assert ">alice<" in queues.text
    finally:
        oidc_provider.untamper()
        drop_database(created)
