"""Start the test OpenID Connect provider (django-oauth-toolkit, tests/oidc_provider) in its own
process, and sign in through it the way a browser does, over real HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "holdpoint-test"
CLIENT_SECRET = "holdpoint-test-client-secret"
IDP_PASSWORD = "idp-password-for-tests"
IDP_USERS = ("alice", "bob")
TEST_CLIENT_CALLBACK = "http://testserver/oidc/callback/"


def _pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class OidcProvider:
    state_dir: Path
    url: str
    process: subprocess.Popen[bytes]
    redirect_uris: list[str] = field(default_factory=lambda: [TEST_CLIENT_CALLBACK])

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOLDPOINT_TEST_OIDC_DIR": str(self.state_dir),
            "DJANGO_SETTINGS_MODULE": "tests.oidc_provider.settings",
        }

    def prepare(self) -> None:
        spec = {
            "users": dict.fromkeys(IDP_USERS, IDP_PASSWORD),
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "redirect_uris": self.redirect_uris,
        }
        subprocess.run(
            [sys.executable, "-m", "tests.oidc_provider.prepare", json.dumps(spec)],
            cwd=ROOT,
            env=self.env(),
            check=True,
            timeout=120,
        )

    def allow_redirect_uri(self, uri: str) -> None:
        if uri not in self.redirect_uris:
            self.redirect_uris.append(uri)
            self.prepare()

    def set_groups(self, username: str, groups: list[str]) -> None:
        path = self.state_dir / "claims.json"
        claims = json.loads(path.read_text()) if path.exists() else {}
        claims[username] = groups
        path.write_text(json.dumps(claims))

    def tamper(
        self, *, claims: dict[str, Any] | None = None, drop: tuple[str, ...] = (), key: str = "provider"
    ) -> None:
        """The next ID tokens are rewritten: `claims` changed, `drop` removed, signed again with
        the provider's key or (`key="foreign"`) another one under the provider's key id."""
        (self.state_dir / "tamper.json").write_text(
            json.dumps({"claims": claims or {}, "drop": list(drop), "key": key})
        )

    def untamper(self) -> None:
        (self.state_dir / "tamper.json").unlink(missing_ok=True)

    def issued(self) -> list[dict[str, Any]]:
        path = self.state_dir / "issued.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def provider_key_pem(self) -> str:
        return (self.state_dir / "provider-key.pem").read_text()


def provider_start(state_dir: Path) -> OidcProvider:
    state_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    (state_dir / "config.json").write_text(json.dumps({"issuer": f"{url}/o"}))
    (state_dir / "provider-key.pem").write_text(_pem())
    (state_dir / "foreign-key.pem").write_text(_pem())
    provider = OidcProvider(state_dir=state_dir, url=url, process=None)  # type: ignore[arg-type]
    provider.prepare()
    log = (state_dir / "provider.log").open("wb")
    provider.process = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        env=provider.env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                return provider
        except requests.ConnectionError:
            pass
        if provider.process.poll() is not None or time.monotonic() > deadline:
            provider.process.kill()
            raise RuntimeError(f"the test OIDC provider did not start: {(state_dir / 'provider.log').read_text()}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    provider = provider_start(tmp_path_factory.mktemp("oidc-provider"))
    yield provider
    provider.process.terminate()
    provider.process.wait(timeout=10)


@pytest.fixture
def sso(settings: Any, oidc_provider: OidcProvider) -> Iterator[OidcProvider]:
    """Holdpoint set up for single sign-on with the test provider; the claims and any tampering
    are reset after the test."""
    from accounts.oidc import oidc_discovery_forget

    settings.OIDC_ISSUER = oidc_provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.HOLDPOINT_OIDC_PROVIDER_NAME = "Test IdP"
    oidc_discovery_forget()
    yield oidc_provider
    oidc_provider.untamper()
    (oidc_provider.state_dir / "claims.json").unlink(missing_ok=True)
    oidc_discovery_forget()


class ProviderBrowser:
    """A person at the provider: signs in there and follows its redirects, stopping at the one
    back to Holdpoint (which the caller sends to Holdpoint as it likes)."""

    def __init__(self, username: str) -> None:
        self.username = username
        self.http = requests.Session()

    def authorize(self, authorize_url: str) -> str:
        """Go to the provider's authorization URL; answer the callback URL it sends back to."""
        response = self.http.get(authorize_url, allow_redirects=False, timeout=10)
        for _ in range(6):
            location = response.headers.get("Location", "")
            if response.status_code in (301, 302, 303) and urlsplit(location).path.endswith("/oidc/callback/"):
                return location
            if response.status_code in (301, 302, 303):
                response = self.http.get(urljoin(response.url, location), allow_redirects=False, timeout=10)
            elif response.status_code == 200 and 'name="password"' in response.text:
                login_url = response.url
                next_url = parse_qs(urlsplit(login_url).query).get("next", [""])[0]
                response = self.http.post(
                    login_url,
                    data={
                        "username": self.username,
                        "password": IDP_PASSWORD,
                        "next": next_url,
                        "csrfmiddlewaretoken": self.http.cookies["provider_csrftoken"],
                    },
                    headers={"Referer": login_url},
                    allow_redirects=False,
                    timeout=10,
                )
            else:
                raise AssertionError(f"the provider answered {response.status_code}: {response.text[:500]}")
        raise AssertionError("the provider never sent the browser back")
