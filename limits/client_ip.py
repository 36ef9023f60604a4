"""The client's address for django-axes' login lock-out (settings.AXES_CLIENT_IP_CALLABLE)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR; behind a proxy (HOLDPOINT_BEHIND_PROXY), the address the proxy saw.

    That is the right-most X-Forwarded-For entry, the one the proxy appended: the entries left of
    it come from the client and could name anyone. Without this every login would come from the
    proxy's address, and one person's failures would lock everybody out of an account.
    """
    if settings.BEHIND_PROXY:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last
    return str(request.META.get("REMOTE_ADDR", ""))
