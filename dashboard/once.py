"""A secret shown once: one-time form tokens and the notice that shows the secret (every page app
uses them).

Creating an API key or a webhook endpoint, or rotating a signing secret, answers the POST itself
(no redirect), so that the secret never sits in a URL, the session or a flash message. Reloading
that answer would post the form again: a second key, or a second rotation that voids the secret
just copied. Each such form carries a token; the first POST with it claims it, and any later
one with the same token changes nothing.

A claim is a row of `limits.OnceClaim` (unique key), not a cache entry: the table exists after
`migrate` alone, and nothing evicts a claim before its lifetime ends (the database cache culled
a third of its entries beyond 300, and a Redis cache may evict under memory pressure).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django import forms
from django.db import IntegrityError, transaction
from django.utils import timezone

from limits.models import OnceClaim

ONCE_TTL_S = 24 * 3600


def once_token() -> str:
    """A fresh token for a form about to be rendered."""
    return uuid.uuid4().hex


def once_claim(*, user_id: int | None, purpose: str, token: uuid.UUID) -> bool:
    """True the first time this user posts this token for this purpose; False afterwards."""
    assert user_id is not None, "a logged-in user's form"
    now = timezone.now()
    # Claims are rare (a key or an endpoint created): purging the expired ones here, on an
    # index, keeps the table at a day's claims without a periodic task.
    OnceClaim.objects.filter(claimed_at__lt=now - timedelta(seconds=ONCE_TTL_S)).delete()
    try:
        with transaction.atomic():
            OnceClaim.objects.create(key=f"{purpose}:{user_id}:{token.hex}", claimed_at=now)
    except IntegrityError:
        return False
    return True


class OnceForm(forms.Form):
    once = forms.UUIDField(widget=forms.HiddenInput)


@dataclass(frozen=True)
class ShownOnce:
    """A secret in the answer to the POST that made it, as `dashboard/_shown_once.html` shows it:
    a heading, what to do with it, and the secret with its copy button."""

    secret: str
    heading: str
    advice: str
    name: str  # the notice's ids: new-<name>, h-new-<name>
    code_id: str  # where tests and the copy button find the secret
    copy_label: str

    @classmethod
    def signing_secret(cls, secret: str, *, subject: str, rotated: bool, made: str) -> ShownOnce:
        """A webhook's or a channel's signing secret: a new one (`made`: "Registered"...) or a rotated one."""
        advice = "Give this signing secret to the receiver now: it will not be shown again."
        return cls(
            secret=secret,
            heading=f"{'New signing secret' if rotated else made}: {subject}",
            advice=advice + (" It signs every try from now on." if rotated else ""),
            name="secret",
            code_id="signing-secret",
            copy_label="Copy the signing secret",
        )


def url_host(url: str) -> str:
    """An endpoint's host, never its path or query (which may carry a token)."""
    parts = urlsplit(str(url or ""))
    name = parts.hostname or "endpoint"
    return f"{name}:{parts.port}" if parts.port else name
