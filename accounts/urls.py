"""Signing in: the login page (before django.contrib.auth's, whose other views stay) and the
OpenID Connect start and callback (404 without OIDC_ISSUER)."""

from django.urls import URLPattern, path

from .oidc import SignInCallbackView, SignInStartView
from .signin import SignInView

urlpatterns: list[URLPattern] = [
    path("accounts/login/", SignInView.as_view(), name="login"),
    # The names are mozilla-django-oidc's: its backend builds the redirect_uri from the callback's.
    path("oidc/authenticate/", SignInStartView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", SignInCallbackView.as_view(), name="oidc_authentication_callback"),
]
