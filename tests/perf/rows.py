"""The statements of the API's door, which the counts of tests/perf add to a call's own."""

from __future__ import annotations

from django.core.cache import caches
from django.db import connection

from config.cache import HoldpointRedisCache


def door() -> int:
    """The statements of the API's door before a call's own: none with Holdpoint's Redis cache
    (the throttle counts in Redis, and the key, read by an earlier call, is remembered:
    accounts.auth; limits.throttle chooses Redis by the same test); without it, one on PostgreSQL
    (the key's read and the throttle window's upsert in one statement:
    limits.throttle.row_and_window_hit_sql) and two elsewhere."""
    if isinstance(caches["default"], HoldpointRedisCache):
        return 0
    return 1 if connection.vendor == "postgresql" else 2
