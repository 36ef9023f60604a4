"""Throttle windows and one-time claims: one row per key, changed by single atomic statements."""

from __future__ import annotations

from django.db import models


class ThrottleWindow(models.Model):
    """The current fixed window of one throttle key (`api_key:<pk>`): one row per key, reused.

    Written only by `limits.throttle.window_hit`, one upsert per request, so the table holds
    one row per API key that has ever called and never grows with traffic.
    """

    key = models.CharField(max_length=100, primary_key=True)
    bucket = models.BigIntegerField(help_text="the window's number: its start in epoch seconds // its length")
    hits = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"{self.key} @ {self.bucket}: {self.hits}"


class OnceClaim(models.Model):
    """A one-time form token that has been used (approvals/once.py); the unique key is the claim."""

    key = models.CharField(max_length=200, unique=True)
    # Serves the purge of claims older than the tokens' lifetime.
    claimed_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.key
