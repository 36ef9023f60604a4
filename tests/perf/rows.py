"""The statements of the API's door, which the counts of tests/perf add to a call's own."""

from __future__ import annotations

from django.core.cache import caches

from config.cache import HoldpointRedisCache


def door() -> int:
    """The statements of the API's door before a call's own: none with Holdpoint's Redis cache
    (the throttle counts in Redis, and the key, read by an earlier call, is remembered:
    accounts.auth; limits.throttle chooses Redis by the same test), two without it (the key's
    read, the throttle window's upsert)."""
    return 0 if isinstance(caches["default"], HoldpointRedisCache) else 2
