"""Single sign-on with OpenID Connect (contract §12), through mozilla-django-oidc.

The library runs the authorization code flow: state, nonce and the PKCE verifier kept in the
session, the code exchanged at the token endpoint, the ID token's signature checked against the
provider's published keys, the nonce compared, the state deleted once used. This module adds what
it leaves to its users:

- discovery: the endpoints come from OIDC_ISSUER's `/.well-known/openid-configuration`, fetched
  when a sign-in needs them (never at import, never on an ordinary request) and kept an hour;
- the ID token's issuer, audience (and `azp` beside other audiences), expiry and issue time are
  required and checked (the library checks the signature and nonce only);
- users are found by (issuer, `sub`) alone and created at their first sign-in;
- the roles claim sets memberships (and groups) at every sign-in (accounts.services);
- any refusal sends the browser back to the login page with a message, signing nobody in.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import auth, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from .claims import claimed_access
from .groups import groups_from_claim
from .models import OidcIdentity
from .services import memberships_from_claim
from .signin import signed_in_mark, sso_provider_name

logger = logging.getLogger(__name__)

DISCOVERY_TTL_S = 3600.0
CLOCK_LEEWAY_S = 60  # the provider's clock and ours may differ this much
USERNAME_MAX = 150

_discovered: dict[str, tuple[float, dict[str, Any]]] = {}
_discovered_lock = threading.Lock()


class SignInRefused(SuspiciousOperation):
    """A sign-in that must not happen: the message says why, for the log, never for the page."""


def oidc_configured() -> bool:
    return bool(settings.OIDC_ISSUER and settings.OIDC_RP_CLIENT_ID)


def oidc_discovery() -> dict[str, Any]:
    """The provider's discovery document (OpenID Connect Discovery 1.0), checked to be the
    issuer's own; fetched at most once an hour per process."""
    issuer = settings.OIDC_ISSUER
    now = time.monotonic()
    with _discovered_lock:
        cached = _discovered.get(issuer)
    if cached and now - cached[0] < DISCOVERY_TTL_S:
        return cached[1]
    response = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=settings.OIDC_TIMEOUT)
    response.raise_for_status()
    document = response.json()
    if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != issuer:
        raise SignInRefused(f"the discovery document at {issuer} names another issuer")
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(document.get(key), str):
            raise SignInRefused(f"the discovery document at {issuer} has no {key}")
    with _discovered_lock:
        _discovered[issuer] = (now, document)
    return document


def oidc_discovery_forget() -> None:
    with _discovered_lock:
        _discovered.clear()


class OidcBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, with the endpoints from discovery (read when a sign-in
    uses them: Django builds a backend for every session's user lookup, too)."""

    OIDC_RP_SIGN_ALGO = "RS256"  # what Keycloak, Okta, Entra ID and Google sign ID tokens with
    OIDC_RP_IDP_SIGN_KEY = None  # the keys come from the provider's jwks_uri

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__: it reads every endpoint from the settings.
        self.UserModel = get_user_model()

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:
        return settings.OIDC_RP_CLIENT_ID

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:
        return settings.OIDC_RP_CLIENT_SECRET

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return oidc_discovery()["token_endpoint"]

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return oidc_discovery()["jwks_uri"]

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str | None:
        return oidc_discovery().get("userinfo_endpoint")

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback (SignInCallbackView) signs in this way, with the nonce and PKCE
        # verifier it took from the session for the state it got: a password form, or a code
        # posted anywhere else, never reaches the token endpoint.
        if not oidc_configured() or set(kwargs) != {"nonce", "code_verifier"} or not all(kwargs.values()):
            return None
        return super().authenticate(request, **kwargs)

    def _verify_jws(self, payload: Any, key: Any) -> dict[str, Any]:
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise SignInRefused(f"ID token signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}")
        try:
            claims = jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=settings.OIDC_RP_CLIENT_ID,
                issuer=oidc_discovery()["issuer"],
                leeway=CLOCK_LEEWAY_S,
                options={"require": ["iss", "sub", "aud", "exp", "iat"]},
            )
        except jwt.InvalidTokenError as error:
            raise SignInRefused(f"ID token refused: {error}") from error
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != settings.OIDC_RP_CLIENT_ID:
            raise SignInRefused("ID token for several audiences without this client as its azp")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims, completed by the userinfo endpoint's (when the provider has one):
        a claim both carry is taken from the signed ID token."""
        claims: dict[str, Any] = {}
        if self.OIDC_OP_USER_ENDPOINT and access_token:
            userinfo = super().get_userinfo(access_token, id_token, payload)
            if userinfo.get("sub") != payload["sub"]:
                raise SignInRefused("the userinfo answer is about another subject")
            claims.update(userinfo)
        claims.update(payload)
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return isinstance(claims.get("sub"), str) and bool(claims["sub"])

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(
            oidc_identities__issuer=claims["iss"], oidc_identities__subject=claims["sub"]
        )

    @transaction.atomic
    def create_user(self, claims: dict[str, Any]) -> User:
        user = self.UserModel.objects.create_user(username=_free_username(claims), email=claims.get("email") or "")
        OidcIdentity.objects.create(user=user, issuer=claims["iss"], subject=claims["sub"])
        logger.info("single sign-on: user %s created for %s at %s", user.get_username(), claims["sub"], claims["iss"])
        return self.update_user(user, claims)

    @transaction.atomic
    def update_user(self, user: User, claims: dict[str, Any]) -> User:
        profile = {
            "email": claims.get("email") or user.email,
            "first_name": (claims.get("given_name") or user.first_name)[:150],
            "last_name": (claims.get("family_name") or user.last_name)[:150],
        }
        if any(getattr(user, name) != value for name, value in profile.items()):
            for name, value in profile.items():
                setattr(user, name, value)
            user.save(update_fields=list(profile))
        claimed = claimed_access(claims.get(settings.HOLDPOINT_OIDC_ROLES_CLAIM))
        applied = memberships_from_claim(user=user, claimed=claimed)
        groups_from_claim(user=user, claimed=applied.groups)
        logger.info(
            "single sign-on: %s signed in; memberships %s",
            user.get_username(),
            ", ".join(f"{m.team.slug}:{m.role}" for m in applied.memberships) or "none",
        )
        return user


def _free_username(claims: dict[str, Any]) -> str:
    """`preferred_username`, else the email's local part, else the subject, in Django's username
    characters; with `-2`, `-3`… when taken (a local user of that name is never reused)."""
    email = claims.get("email") or ""
    wanted = claims.get("preferred_username") or email.split("@")[0] or claims["sub"]
    base = re.sub(r"[^\w.@+-]", "-", str(wanted))[: USERNAME_MAX - 8].strip("-") or "user"
    user_model = get_user_model()
    candidate, n = base, 1
    while user_model.objects.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


class SignInStartView(OIDCAuthenticationRequestView):
    """/oidc/authenticate/: to the provider, with a fresh state, nonce and PKCE challenge."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__: it reads the authorization endpoint from the settings.
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    @property
    def OIDC_OP_AUTH_ENDPOINT(self) -> str:
        return oidc_discovery()["authorization_endpoint"]

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:
        return settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_configured():
            raise Http404("Single sign-on is not set up.")
        try:
            return super().get(request)
        except (requests.RequestException, ValueError, SignInRefused) as error:
            logger.warning("single sign-on: the provider cannot be reached: %s", error)
            messages.error(request, f"{sso_provider_name()} cannot be reached just now; try again in a moment.")
            return HttpResponseRedirect(settings.LOGIN_URL)


class SignInCallbackView(OIDCAuthenticationCallbackView):
    """/oidc/callback/: the provider's answer. Anything wrong (an unknown or replayed state, a
    token refused, the provider unreachable, an error from it) signs nobody in."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_configured():
            raise Http404("Single sign-on is not set up.")
        try:
            return super().get(request)
        except (SuspiciousOperation, requests.RequestException, jwt.PyJWTError, KeyError, ValueError) as error:
            # The library's messages may quote the request's own state or code: %r escapes them.
            logger.warning("single sign-on refused: %s: %r", type(error).__name__, str(error)[:300])
            return self.login_failure()

    def login_failure(self) -> HttpResponse:
        messages.error(self.request, f"Signing in with {sso_provider_name()} did not work; nobody was signed in.")
        return HttpResponseRedirect(settings.LOGIN_URL)

    def login_success(self) -> HttpResponse:
        auth.login(self.request, self.user)  # always: a sign-in again is what a recent sign-in asks for
        signed_in_mark(self.request)
        return HttpResponseRedirect(self.success_url)
