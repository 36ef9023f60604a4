"""Signing in, either way: the password backend (switchable off, contract §12), the login page,
and when the session last signed in (making a reviewer token asks for a recent sign-in)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.contrib.auth.views import LoginView
from django.http import HttpRequest

SIGNED_IN_AT = "holdpoint_signed_in_at"  # session key: unix time of the session's last sign-in
RECENT_SIGN_IN = timedelta(minutes=10)  # contract §12: making a reviewer token


def signed_in_mark(request: HttpRequest) -> None:
    request.session[SIGNED_IN_AT] = time.time()


def signed_in_recently(request: HttpRequest, *, within: timedelta = RECENT_SIGN_IN) -> bool:
    """True when this session signed in (password or single sign-on) within `within`; a session
    older than the marker, or one that never had it, must sign in again."""
    signed_in_at = request.session.get(SIGNED_IN_AT)
    return isinstance(signed_in_at, (int, float)) and time.time() - signed_in_at <= within.total_seconds()


def on_user_logged_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if request is not None and hasattr(request, "session"):
        signed_in_mark(request)


def password_login_allowed(user: AbstractBaseUser) -> bool:
    return bool(settings.HOLDPOINT_PASSWORD_LOGIN) or bool(getattr(user, "is_superuser", False))


class PasswordBackend(ModelBackend):
    """Django's username and password check; with HOLDPOINT_PASSWORD_LOGIN off it refuses everyone
    but superusers, at /accounts/login/ and /admin/ alike. Sessions it made before stay valid
    until they expire (HOLDPOINT_SESSION_AGE_S)."""

    # type-ignored: django-stubs' ModelBackend and BaseBackend signatures disagree.
    def authenticate(  # type: ignore[override]
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        return user if user is not None and password_login_allowed(user) else None

    async def aauthenticate(  # type: ignore[override]
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        user = await super().aauthenticate(request, username=username, password=password, **kwargs)
        return user if user is not None and password_login_allowed(user) else None


def sso_provider_name() -> str:
    """The name on the "Sign in with …" button, or "" without single sign-on."""
    if not settings.OIDC_ISSUER:
        return ""
    return settings.HOLDPOINT_OIDC_PROVIDER_NAME or urlsplit(settings.OIDC_ISSUER).hostname or settings.OIDC_ISSUER


class SignInForm(AuthenticationForm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not settings.HOLDPOINT_PASSWORD_LOGIN:
            provider = sso_provider_name()
            self.error_messages = {
                **self.error_messages,
                "invalid_login": "Password sign-in is switched off"
                + (f": sign in with {provider}." if provider else "."),
            }


class SignInView(LoginView):
    """/accounts/login/: the password form (fields `username`, `password`, contract §7) unless it
    is switched off, and "Sign in with <provider>" when single sign-on is set up."""

    form_class = SignInForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_provider"] = sso_provider_name()
        context["password_login"] = settings.HOLDPOINT_PASSWORD_LOGIN
        return context
