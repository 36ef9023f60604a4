"""The reviewer API's credentials: personal reviewer tokens (`Bearer hpr_...`) only.

An active agent API key (`hp_...`) is recognised, so that it is refused with 403: an agent must not
decide its own step (contract §10). A reviewer token on the agent endpoints is simply unknown
there (accounts.auth looks keys up among API keys only): 401.
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from accounts.auth import ApiKeyRateThrottle
from accounts.models import ApiKey

from .errors import ReviewerTokenRequired
from .models import TOKEN_PREFIX, ReviewerToken
from .services import reviewer_token_authenticate

logger = logging.getLogger(__name__)
AGENT_KEY_PREFIX = "hp_"


def bearer_credential(request: Request) -> str | None:
    """The credential of `Authorization: Bearer ...`; None without the header (DRF then answers
    401 through IsReviewer); another scheme or an empty credential is refused."""
    header = authentication.get_authorization_header(request).decode("latin-1")
    if not header:
        return None
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer hpr_...' (a reviewer token).")
    return raw.strip()


class ReviewerTokenAuthentication(authentication.BaseAuthentication):
    """Looks the token up on every request: a revoked or expired token is refused at once."""

    def authenticate(self, request: Request) -> tuple[Any, ReviewerToken] | None:
        raw = bearer_credential(request)
        if raw is None:
            return None
        if raw.startswith(AGENT_KEY_PREFIX) and not raw.startswith(TOKEN_PREFIX):
            key = ApiKey.objects.active().filter(key_hash=ApiKey.hash_key(raw)).values_list("pk", flat=True)[:1]
            for key_id in key:
                logger.warning("reviewer API: agent API key %s refused on %r", key_id, request.path)
                raise ReviewerTokenRequired(
                    "This endpoint is for reviewers: an agent API key can never read the review queue or decide."
                )
            logger.info("reviewer API: unknown agent-style key refused")
            raise exceptions.AuthenticationFailed("Unknown or revoked API key; this endpoint takes reviewer tokens.")
        token = reviewer_token_authenticate(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown, expired or revoked reviewer token.")
        return (token.user, token)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="holdpoint"'


class IsReviewer(permissions.BasePermission):
    """A reviewer token's user; the team and role are checked per request (services)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.auth, ReviewerToken):
            return True
        raise exceptions.NotAuthenticated("A reviewer token is required: 'Authorization: Bearer hpr_...'.")


class ReviewerTokenRateThrottle(ApiKeyRateThrottle):
    """The agent keys' fixed window (HOLDPOINT_API_RATE), counted per reviewer token."""

    def window_subject(self, request: Request) -> str | None:
        return f"reviewer_token:{request.auth.pk}" if isinstance(request.auth, ReviewerToken) else None
