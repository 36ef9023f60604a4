"""Fixed-window counters for the API throttle: O(1), atomic, shared by every web process.

One call per request, `window_hit(key, bucket, length)`, returns how many hits the window has
had, this one included. With a Redis cache (`CACHE_URL=redis://…`) it is one round trip
(a script: `INCR`, and `EXPIRE` when that made the key); otherwise one upsert on
`limits_throttlewindow`, which `migrate` creates. Both are atomic, so N processes together
admit at most the limit.

Redis is an optimisation, not a dependency: when it cannot be reached the hit is not counted
(`None`: the caller lets the request through), a warning is logged at most once a minute per
process, and Redis is not tried again for a few seconds, so an outage costs no request a
connection timeout each.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection
from redis.exceptions import RedisError

from .models import ThrottleWindow

logger = logging.getLogger("holdpoint.throttle")

RETRY_REDIS_AFTER_S = 5.0
WARN_EVERY_S = 60.0

_redis_down_until = 0.0
_last_warning = 0.0


def window_hit(key: str, bucket: int, length_s: int) -> int | None:
    """Count one hit in window `bucket` of `key`; the window's total, or None if not counted."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        return _redis_hit(backend, key, bucket, length_s)
    return _database_hit(key, bucket)


def _redis_hit(backend: RedisCache, key: str, bucket: int, length_s: int) -> int | None:
    global _redis_down_until, _last_warning
    now = time.monotonic()
    if now < _redis_down_until:
        return None
    full_key = backend.make_and_validate_key(f"throttle:{key}:{bucket}")
    try:
        # RedisCache._cache is Django's client (config.cache.ReusingRedisCacheClient here).
        client: Any = backend._cache.get_client(full_key, write=True)  # type: ignore[attr-defined]
        # The window's key lives a little longer than the window; a later window is a new key.
        hits = _hit_script(client)(keys=[full_key], args=[length_s + 1])
    except RedisError as error:
        _redis_down_until = now + RETRY_REDIS_AFTER_S
        if now - _last_warning >= WARN_EVERY_S or _last_warning == 0.0:
            _last_warning = now
            logger.warning(
                "throttle: the Redis cache cannot be reached (%s: %s); API calls are not rate-limited until it answers",
                type(error).__name__,
                error,
            )
        return None
    return int(hits)


# INCR, and the window's expiry set by the hit that created the key: one command, atomic (a
# pipelined SET NX EX + INCR did the same in one round trip, with more client work per call).
_HIT = """
local hits = redis.call('INCR', KEYS[1])
if hits == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return hits
"""
_scripts: dict[int, Any] = {}


def _hit_script(client: Any) -> Any:
    """The hit as a registered script of this client (EVALSHA; redis-py loads it if needed)."""
    script = _scripts.get(id(client))
    if script is None:
        script = _scripts.setdefault(id(client), client.register_script(_HIT))
    return script


_UPSERT: str | None = None


def _database_hit(key: str, bucket: int) -> int:
    global _UPSERT
    if _UPSERT is None:
        table = connection.ops.quote_name(ThrottleWindow._meta.db_table)
        # PostgreSQL and SQLite (3.35+) both take this: the row is locked by the conflict, and
        # SET reads the old row, so a new window restarts the count at 1.
        _UPSERT = (
            f"INSERT INTO {table} (key, bucket, hits) VALUES (%s, %s, 1) "  # noqa: S608 (table name only)
            f"ON CONFLICT (key) DO UPDATE SET "
            f"hits = CASE WHEN {table}.bucket = EXCLUDED.bucket THEN {table}.hits + 1 ELSE 1 END, "
            f"bucket = EXCLUDED.bucket "
            f"RETURNING hits"
        )
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT, [key, bucket])
        row = cursor.fetchone()
    return int(row[0])
