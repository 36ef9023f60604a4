"""Fixed-window counters for the API throttle: O(1), atomic, shared by every web process.

One call per request, `window_hit(key, bucket, length)`, returns how many hits the window has
had, this one included. With a Redis cache (`CACHE_URL=redis://…`) it is one round trip
(a script: `INCR`, and `EXPIRE` when that made the key); otherwise one upsert on
`limits_throttlewindow`, which `migrate` creates. Both are atomic, so N processes together
admit at most the limit.

The same round trip can read a shared token (`window_hit_and_token`): a value in Redis that
changes whenever what a process remembered must be read again (`token_read`, `token_renew`).
`accounts.auth` remembers active API keys that way, and checks them against the token with each
request's hit.

Redis is an optimisation, not a dependency: when it cannot be reached the hit is counted in the
database instead (the table's window, apart from Redis's: each admits at most the limit), a
warning is logged at most once a minute per process, and Redis is not tried again for
RETRY_REDIS_AFTER_S (config.cache), so an outage costs no request a connection timeout each.
The shared token cannot be read meanwhile (`None`): `accounts.auth` then reads every key, and
on PostgreSQL counts the call in the same statement (`row_and_window_hit_sql`): one round trip
a call on that path, as with Redis.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from django.core.cache import caches
from django.db import connection
from redis.exceptions import RedisError

from config.cache import RETRY_REDIS_AFTER_S, HoldpointRedisCache

from .models import ThrottleWindow

logger = logging.getLogger("holdpoint.throttle")

WARN_EVERY_S = 60.0

_redis_down_until = 0.0
_last_warning = 0.0


def window_hit(key: str, bucket: int, length_s: int) -> int:
    """Count one hit in window `bucket` of `key`: the window's total, in Redis when the cache is
    Redis and answers, else in the database."""
    backend = _redis_backend()
    if backend is not None:
        hits = _redis_hit(backend, key, bucket, length_s)
        if hits is not None:
            return hits
    return _database_hit(key, bucket)


def window_hit_and_token(key: str, bucket: int, length_s: int, token: str) -> tuple[int, int | None] | None:
    """`window_hit`, and in the same round trip the shared token `token` (None when it is not
    set). None when the cache is not Redis or cannot be reached: nothing was counted then."""
    backend = _redis_backend()
    if backend is None:
        return None
    answer = _redis_call(
        backend,
        _HIT_AND_TOKEN,
        [f"throttle:{key}:{bucket}", _TOKEN_KEY.format(token)],
        [length_s + 1],
    )
    if answer is None:
        return None
    hits, value = answer
    return int(hits), None if value is None else int(value)


def token_read(token: str) -> int | None:
    """The shared token `token`, set to a fresh value if it has none; None when the cache is not
    Redis or cannot be reached."""
    backend = _redis_backend()
    if backend is None:
        return None
    value = _redis_call(backend, _TOKEN_READ, [_TOKEN_KEY.format(token)], [secrets.randbits(62)])
    return None if value is None else int(value)


def token_renew(token: str) -> bool:
    """Give the shared token `token` a new value: whatever was remembered under the old one is
    read again. False when the cache is not Redis or cannot be reached."""
    backend = _redis_backend()
    if backend is None:
        return False
    return _redis_call(backend, _TOKEN_RENEW, [_TOKEN_KEY.format(token)], [secrets.randbits(62)]) is not None


def _redis_backend() -> HoldpointRedisCache | None:
    """The default cache when it is Redis (CACHE_URL=redis://…, config.cache): the shared
    tokens need it."""
    backend = caches["default"]
    return backend if isinstance(backend, HoldpointRedisCache) else None


def _redis_hit(backend: HoldpointRedisCache, key: str, bucket: int, length_s: int) -> int | None:
    # The window's key lives a little longer than the window; a later window is a new key.
    hits = _redis_call(backend, _HIT, [f"throttle:{key}:{bucket}"], [length_s + 1])
    return None if hits is None else int(hits)


def _redis_call(backend: HoldpointRedisCache, script: str, keys: list[str], args: list[Any]) -> Any:
    """Run one of the scripts here on the cache's Redis (one round trip, on this thread's own
    connection); None when Redis is down, or was down less than RETRY_REDIS_AFTER_S ago (a
    warning at most once a minute)."""
    global _redis_down_until, _last_warning
    now = time.monotonic()
    if now < _redis_down_until:
        return None
    # make_key, not make_and_validate_key: these keys are this module's own ASCII names.
    full_keys = [backend.make_key(key) for key in keys]
    try:
        return backend.client.script(script, full_keys, args)
    except RedisError as error:
        _redis_down_until = now + RETRY_REDIS_AFTER_S
        if now - _last_warning >= WARN_EVERY_S or _last_warning == 0.0:
            _last_warning = now
            logger.warning(
                "throttle: the Redis cache cannot be reached (%s: %s); API calls are counted in the database, and"
                " API keys are read from it on every call, until it answers",
                type(error).__name__,
                error,
            )
        return None


# INCR, and the window's expiry set by the hit that created the key: one command, atomic (a
# pipelined SET NX EX + INCR did the same in one round trip, with more client work per call).
_HIT = """
local hits = redis.call('INCR', KEYS[1])
if hits == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return hits
"""
# The same, and the value of a shared token (KEYS[2]).
_HIT_AND_TOKEN = """
local hits = redis.call('INCR', KEYS[1])
if hits == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return {hits, redis.call('GET', KEYS[2])}
"""
# A token read, set first to ARGV[1] if it has no value (a new or flushed Redis).
_TOKEN_READ = """
local value = redis.call('GET', KEYS[1])
if not value then
    value = ARGV[1]
    redis.call('SET', KEYS[1], value)
end
return value
"""
_TOKEN_RENEW = """
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
_TOKEN_KEY = "token:{}"


_UPSERT: str | None = None


def _on_conflict(table: str) -> str:
    """The upsert's conflict clause: the row is locked by the conflict, and SET reads the old row,
    so a new window restarts the count at 1."""
    return (
        f"ON CONFLICT (key) DO UPDATE SET "
        f"hits = CASE WHEN {table}.bucket = EXCLUDED.bucket THEN {table}.hits + 1 ELSE 1 END, "
        f"bucket = EXCLUDED.bucket RETURNING hits"
    )


def _database_hit(key: str, bucket: int) -> int:
    global _UPSERT
    if _UPSERT is None:
        table = connection.ops.quote_name(ThrottleWindow._meta.db_table)
        # PostgreSQL and SQLite (3.35+) both take this.
        _UPSERT = f"INSERT INTO {table} (key, bucket, hits) VALUES (%s, %s, 1) {_on_conflict(table)}"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT, [key, bucket])
        row = cursor.fetchone()
    return int(row[0])


def row_and_window_hit_sql(select_sql: str) -> str | None:
    """`select_sql` (at most one row, its first column the throttle key of the window to count)
    and a hit in that key's window, in one statement: the row, its last column the window's
    hits (`window_hit`'s count, in the database); no row, and nothing counted, when
    `select_sql` finds none. Its values: `select_sql`'s, then the window's bucket. None on a
    database without data-modifying CTEs (SQLite): there the row and the hit take two.

    The hit is the database's upsert (`_database_hit`), so it counts in the same window as the
    calls `window_hit` counts there."""
    if connection.vendor != "postgresql":
        return None
    table = connection.ops.quote_name(ThrottleWindow._meta.db_table)
    # `found` is read once (MATERIALIZED); `counted` always returns the row it inserted or
    # updated, so a key found gives one row, its hits last.
    return (
        f"WITH found (throttle_key) AS MATERIALIZED ({select_sql}), "  # noqa: S608 (names only)
        f"counted AS (INSERT INTO {table} (key, bucket, hits) SELECT found.throttle_key, %s, 1 FROM found "
        f"{_on_conflict(table)}) "
        f"SELECT found.*, counted.hits FROM found, counted"
    )
