"""API keys: `Authorization: Bearer hp_...`, one team per key, throttled per key."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.request import Request

from .models import ApiKey


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer hp_...'.")
        # key_hash is unique: a slice, not .first(), which would add an ORDER BY to compile.
        found = ApiKey.objects.active().select_related("team").filter(key_hash=ApiKey.hash_key(raw.strip()))[:1]
        for key in found:
            return (None, key)
        raise exceptions.AuthenticationFailed("Unknown or revoked API key.")

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="holdpoint"'


class HasTeamKey(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.auth, ApiKey):
            raise exceptions.NotAuthenticated("An API key is required: 'Authorization: Bearer hp_...'.")
        return True


class ApiKeyRateThrottle(throttling.SimpleRateThrottle):
    """Counts per key in the shared cache, so every web process sees the same budget."""

    scope = "api_key"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if isinstance(request.auth, ApiKey):
            return f"throttle:api_key:{request.auth.pk}"
        return None
