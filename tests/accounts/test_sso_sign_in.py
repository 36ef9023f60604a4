"""Single sign-on (contract §12) over real HTTP: Holdpoint's callback against a real OpenID Connect
provider (django-oauth-toolkit, its own process), with ID tokens as the provider issues them and
as a forger would make them (signed again with the provider's key, or with a foreign one)."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import Membership, OidcIdentity
from accounts.services import reviewer_create, team_create
from accounts.signin import SIGNED_IN_AT
from tests.conftest import PASSWORD
from tests.oidc_provider.harness import CLIENT_ID, OidcProvider, ProviderBrowser

pytestmark = pytest.mark.django_db


def sign_in_start(client: Client, next_url: str = "") -> str:
    """Holdpoint's redirect to the provider: the authorization URL."""
    response = client.get("/oidc/authenticate/" + (f"?next={next_url}" if next_url else ""))
    assert response.status_code == 302, response.content
    return response["Location"]


def callback_path(location: str) -> str:
    parts = urlsplit(location)
    return f"{parts.path}?{parts.query}"


def sign_in(client: Client, username: str = "alice", next_url: str = "") -> Any:
    location = ProviderBrowser(username).authorize(sign_in_start(client, next_url))
    return client.get(callback_path(location))


def signed_in_as(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id).username if user_id else None


def memberships(username: str) -> dict[str, tuple[str, str]]:
    return {
        m.team.slug: (m.role, m.source)
        for m in Membership.objects.filter(user__username=username).select_related("team")
    }


@pytest.fixture
def teams(db: Any) -> None:
    team_create(slug="acme")
    team_create(slug="globex")


def test_the_authorization_request_uses_the_code_flow_with_pkce_and_a_nonce(sso: OidcProvider) -> None:
    location = sign_in_start(Client())

    query = parse_qs(urlsplit(location).query)
    assert location.startswith(f"{sso.issuer}/authorize/")  # from the discovery document
    assert query["response_type"] == ["code"]
    assert query["client_id"] == [CLIENT_ID]
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) == 43
    assert query["nonce"][0] and query["state"][0]
    assert query["redirect_uri"] == ["http://testserver/oidc/callback/"]


def test_the_first_sign_in_creates_the_user_with_the_claimed_membership(sso: OidcProvider, teams: None) -> None:
    sso.set_groups("alice", ["holdpoint:acme:reviewer", "holdpoint:acme:group:finance", "wiki-editors"])
    client = Client()

    response = sign_in(client, next_url="/search?q=x")

    assert response.status_code == 302 and response["Location"] == "/search?q=x"
    assert signed_in_as(client) == "alice"
    user = User.objects.get(username="alice")
    assert (user.email, user.has_usable_password()) == ("alice@idp.example", False)
    identity = OidcIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject) == (sso.issuer, sso.issued()[-1]["sub"])
    assert memberships("alice") == {"acme": ("reviewer", "claim")}
    assert time.time() - client.session[SIGNED_IN_AT] < 60
    assert "Review queues" in client.get("/").content.decode()


def test_a_changed_claim_at_the_next_sign_in_replaces_the_claimed_memberships(sso: OidcProvider, teams: None) -> None:
    sso.set_groups("alice", ["holdpoint:acme:reviewer"])
    first = Client()
    sign_in(first)
    assert signed_in_as(first) == "alice"
    assert memberships("alice") == {"acme": ("reviewer", "claim")}

    sso.set_groups("alice", ["holdpoint:globex:viewer"])
    client = Client()
    sign_in(client)

    assert signed_in_as(client) == "alice"
    assert User.objects.filter(username__startswith="alice").count() == 1
    assert memberships("alice") == {"globex": ("viewer", "claim")}


def test_a_membership_made_in_holdpoint_stays_whatever_the_claim_says(sso: OidcProvider, teams: None) -> None:
    sso.set_groups("bob", ["holdpoint:acme:viewer"])
    sign_in(Client(), "bob")
    bob = User.objects.get(username="bob")
    Membership.objects.create(user=bob, team=team_create(slug="initech"), role="admin")

    sso.set_groups("bob", [])
    sign_in(Client(), "bob")

    assert memberships("bob") == {"initech": ("admin", "local")}


def test_a_local_account_of_the_same_name_is_never_taken_over(sso: OidcProvider, teams: None) -> None:
    from accounts.models import Team

    local = reviewer_create(username="alice", password=PASSWORD, team=Team.objects.get(slug="acme"), role="admin")
    sso.set_groups("alice", ["holdpoint:globex:reviewer"])
    client = Client()

    sign_in(client)

    assert signed_in_as(client) == "alice-2"
    assert memberships("alice") == {"acme": ("admin", "local")}
    assert memberships("alice-2") == {"globex": ("reviewer", "claim")}
    local.refresh_from_db()
    assert local.check_password(PASSWORD)


def assert_refused(client: Client, response: Any) -> None:
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert signed_in_as(client) is None
    page = client.get("/accounts/login/").content.decode()
    assert "Signing in with Test IdP did not work; nobody was signed in." in page
    assert client.get("/").status_code == 302


@pytest.mark.parametrize(
    ("why", "tampering"),
    [
        ("forged: signed with a foreign key", {"claims": {"groups": ["holdpoint:acme:admin"]}, "key": "foreign"}),
        ("expired", {"claims": {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}}),
        ("for another audience", {"claims": {"aud": "someone-else"}}),
        ("for several audiences, not authorized for us", {"claims": {"aud": [CLIENT_ID, "other"], "azp": "other"}}),
        ("from another issuer", {"claims": {"iss": "http://127.0.0.1:9/o"}}),
        ("without an expiry", {"drop": ("exp",)}),
        ("without a nonce", {"drop": ("nonce",)}),
        ("with another nonce", {"claims": {"nonce": "not-the-one-we-sent"}}),
    ],
)
def test_a_bad_id_token_is_refused_and_nobody_is_signed_in(
    sso: OidcProvider, teams: None, why: str, tampering: dict[str, Any]
) -> None:
    sso.set_groups("alice", ["holdpoint:acme:reviewer"])
    sso.tamper(**tampering)
    client = Client()

    response = sign_in(client)

    assert_refused(client, response)
    assert not User.objects.exists(), why


def test_an_id_token_signed_again_with_the_providers_own_key_is_accepted(sso: OidcProvider, teams: None) -> None:
    """The forgeries above fail for what they changed, not for being signed again."""
    sso.set_groups("alice", ["holdpoint:acme:reviewer"])
    sso.tamper(claims={"given_name": "Alice"})
    client = Client()

    sign_in(client)

    assert signed_in_as(client) == "alice"
    assert User.objects.get(username="alice").first_name == "Alice"


def test_a_replayed_nonce_is_refused(sso: OidcProvider, teams: None) -> None:
    sso.set_groups("alice", ["holdpoint:acme:reviewer"])
    sign_in(Client())
    earlier_nonce = sso.issued()[-1]["nonce"]
    sso.tamper(claims={"nonce": earlier_nonce})
    client = Client()

    response = sign_in(client)

    assert_refused(client, response)


def test_a_replayed_state_is_refused_in_the_same_browser_and_in_another(sso: OidcProvider, teams: None) -> None:
    sso.set_groups("alice", ["holdpoint:acme:reviewer"])
    client = Client()
    callback = callback_path(ProviderBrowser("alice").authorize(sign_in_start(client)))
    assert client.get(callback)["Location"] == "/"
    client.logout()

    assert_refused(client, client.get(callback))
    other = Client()
    assert_refused(other, other.get(callback))


def test_a_state_this_browser_was_not_given_is_refused(sso: OidcProvider, teams: None) -> None:
    sso.set_groups("alice", ["holdpoint:acme:reviewer"])
    victim, attacker = Client(), Client()
    sign_in_start(victim)  # the victim has a sign-in under way, with its own state
    # The attacker's own sign-in, whose callback the victim is made to open.
    attackers_callback = callback_path(ProviderBrowser("alice").authorize(sign_in_start(attacker)))

    assert_refused(victim, victim.get(attackers_callback))


def test_an_error_from_the_provider_signs_nobody_in(sso: OidcProvider) -> None:
    client = Client()
    state = parse_qs(urlsplit(sign_in_start(client)).query)["state"][0]

    assert_refused(client, client.get(f"/oidc/callback/?error=access_denied&state={state}"))


def test_an_inactive_user_is_refused(sso: OidcProvider, teams: None) -> None:
    sso.set_groups("alice", ["holdpoint:acme:reviewer"])
    sign_in(Client())
    User.objects.filter(username="alice").update(is_active=False)
    client = Client()

    assert_refused(client, sign_in(client))


def test_the_login_page_offers_the_provider(sso: OidcProvider) -> None:
    html = Client().get("/accounts/login/?next=/tools/").content.decode()

    assert (
        '<a role="button" class="sso-button" href="/oidc/authenticate/?next=/tools/">Sign in with Test IdP</a>' in html
    )
    assert 'name="password"' in html  # HOLDPOINT_PASSWORD_LOGIN is on by default


def test_without_oidc_settings_nothing_changes(client: Client) -> None:
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    html = client.get("/accounts/login/").content.decode()
    assert "Sign in with" not in html and 'name="password"' in html


def test_a_provider_that_cannot_be_reached_is_said_so_on_the_login_page(sso: OidcProvider, settings: Any) -> None:
    from accounts.oidc import oidc_discovery_forget

    settings.OIDC_ISSUER = f"{sso.url}/no-such-issuer"
    oidc_discovery_forget()
    client = Client()

    response = client.get("/oidc/authenticate/")

    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert "Test IdP cannot be reached just now" in client.get("/accounts/login/").content.decode()
