"""The keys that sign decision receipts (contract §13). Below the core: imports no project app."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class ReceiptKey(models.Model):
    """One Ed25519 key. Rows are added, never edited or deleted: a receipt signed by any key a
    deployment ever used still verifies against the JWKS, which lists them all.

    A generated key keeps its private seed here (`seed`, base64) and has a `generation`, 1 for
    the first and one more per `rotatereceiptkey`: the highest signs. Unique, so that concurrent
    first uses make one key. A key from HOLDPOINT_RECEIPT_KEY is listed with its public part
    only (`seed` empty, no generation): its seed stays in the environment."""

    kid = models.CharField(max_length=64, unique=True)  # RFC 7638 thumbprint of the public key
    x = models.CharField(max_length=64)  # the public key, base64url (RFC 8037)
    seed = models.CharField(max_length=64, blank=True)
    generation = models.PositiveIntegerField(null=True, blank=True, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(generation__isnull=True, seed="") | (Q(generation__isnull=False) & ~Q(seed="")),
                name="receiptkey_generated_has_seed",
            ),
        ]

    def __str__(self) -> str:
        return self.kid
