"""Personal reviewer tokens (contract §10): `Authorization: Bearer hpr_...` acts as its user."""

from __future__ import annotations

import secrets
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiKey

TOKEN_PREFIX = "hpr_"


class ReviewerTokenQuerySet(models.QuerySet["ReviewerToken"]):
    def for_user(self, user_id: int | None) -> ReviewerTokenQuerySet:
        return self.filter(user_id=user_id)

    def active(self, now: datetime | None = None) -> ReviewerTokenQuerySet:
        return self.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now or timezone.now()), revoked_at__isnull=True
        )


class ReviewerToken(models.Model):
    """A reviewer's credential for the reviewer API. Only a SHA-256 of the token is stored (the
    same hash as agent API keys); the prefix is shown so its owner can tell tokens apart."""

    PREFIX_LENGTH = 12  # "hpr_" + 8 characters

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reviewer_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)  # the lookup of every request
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ReviewerTokenQuerySet.as_manager()

    class Meta:
        indexes = [
            # The tokens page: a user's tokens, newest first.
            models.Index(fields=["user", "-created_at"], name="reviewertoken_user_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    @staticmethod
    def hash_token(raw: str) -> str:
        return ApiKey.hash_key(raw)

    @staticmethod
    def generate() -> str:
        return TOKEN_PREFIX + secrets.token_urlsafe(32)

    def is_active(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)
