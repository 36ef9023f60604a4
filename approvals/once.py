"""One-time form tokens, for the forms whose answer shows a secret once.

Creating an API key or a webhook endpoint, or rotating a signing secret, answers the POST itself
(no redirect), so that the secret never sits in a URL, the session or a flash message. Reloading
that answer would post the form again: a second key, or a second rotation that voids the secret
just copied. Each such form carries a token; the first POST with it claims it in the shared
cache, and any later one with the same token changes nothing.
"""

from __future__ import annotations

import uuid

from django import forms
from django.core.cache import cache

ONCE_TTL_S = 24 * 3600


def once_token() -> str:
    """A fresh token for a form about to be rendered."""
    return uuid.uuid4().hex


def once_claim(*, user_id: int | None, purpose: str, token: uuid.UUID) -> bool:
    """True the first time this user posts this token for this purpose; False afterwards."""
    assert user_id is not None, "a logged-in user's form"
    return bool(cache.add(f"once:{purpose}:{user_id}:{token.hex}", 1, timeout=ONCE_TTL_S))


class OnceForm(forms.Form):
    once = forms.UUIDField(widget=forms.HiddenInput)
