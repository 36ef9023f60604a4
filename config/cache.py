"""Django's Redis cache, with one Redis client per connection pool instead of one per call, and
each thread's own connection for the calls an agent waits on.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` for every cache operation,
and building one copies redis-py's whole table of response callbacks. A `redis.Redis` over a
`ConnectionPool` is safe to share between threads (each command borrows a connection from the
pool), so one per pool is kept and reused.

Even reused, redis-py's client costs more CPU around a command than the command's own round
trip: borrowing and returning a pooled connection, its retry and observability layers, the
script wrapper (the figures: bench/README.md, "figures behind comments"). The API pays that on
every call (the throttle's script) and on every event (the webhook delivery's mark: one
`SET NX GET`, `add_or_get`), so those, `add` and `get` go through `command` and `script`: each
thread's own connection, with the pool's settings (address, database, password, timeouts) and
no pool to borrow from. A connection that fails mid-command is closed, and one the server closed
meanwhile is found before use (as the pool checks one it lends): the next command opens a new one.

A Redis that cannot be reached is not tried by every request: once a connection to it fails,
no connection of this process tries again for RETRY_REDIS_AFTER_S (each fails at once), so an
outage costs the requests meanwhile nothing, and a server that does not answer (a host gone,
a firewall) costs one connect timeout per interval instead of one per call.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from typing import Any

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import ConnectionError, NoScriptError, ResponseError, TimeoutError

RETRY_REDIS_AFTER_S = 2.0

# (host, port): the time.monotonic() before which no connection to that Redis tries to connect.
_redis_down_until: dict[tuple[str, int], float] = {}


def redis_down(host: str, port: int) -> bool:
    """Whether a connection to that Redis failed less than RETRY_REDIS_AFTER_S ago."""
    return time.monotonic() < _redis_down_until.get((host, port), 0.0)


class _FailFast:
    """A redis-py connection that does not try to connect while another one to the same server
    just failed to."""

    host: str
    port: int

    # Every way redis-py connects (connect(), and a command sent on a closed connection) ends here.
    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if getattr(self, "_sock", None) is not None:
            return
        server = (self.host, self.port)
        left = _redis_down_until.get(server, 0.0) - time.monotonic()
        if left > 0:
            raise ConnectionError(f"Redis was unreachable moments ago; not tried again for {left * 1000:.0f} ms")
        try:
            super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except (ConnectionError, TimeoutError):
            _redis_down_until[server] = time.monotonic() + RETRY_REDIS_AFTER_S
            raise


class FailFastConnection(_FailFast, redis.Connection):
    pass


class FailFastSSLConnection(_FailFast, redis.SSLConnection):
    pass


class ReusingRedisCacheClient(RedisCacheClient):
    def __init__(self, servers: list[str], *args: Any, **kwargs: Any) -> None:
        super().__init__(servers, *args, **kwargs)
        scheme = servers[0].partition("://")[0] if servers else ""
        connection_class = {"redis": FailFastConnection, "rediss": FailFastSSLConnection}.get(scheme)
        if connection_class is not None:  # (a unix:// socket keeps redis-py's own)
            self._pool_options.setdefault("connection_class", connection_class)  # type: ignore[attr-defined]
        self._clients: dict[int, Any] = {}
        self._local = threading.local()
        self._set_nx_get = True

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        # _get_connection_pool and _client are RedisCacheClient's own (private in django-stubs).
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients.setdefault(id(pool), self._client(connection_pool=pool))  # type: ignore[attr-defined]
        return client

    def command(self, *args: Any) -> Any:
        """One command on this thread's connection to the primary; its parsed reply. An error
        reply raises redis-py's ResponseError; a connection that fails is closed, and raises."""
        connection = self._thread_connection()
        try:
            connection.send_command(*args)
            return connection.read_response()
        except ResponseError:
            raise  # an error reply, read whole: the connection is still in step
        except BaseException:
            connection.disconnect()
            raise

    def script(self, text: str, keys: list[str], args: list[Any]) -> Any:
        """Run the Lua script `text` (EVALSHA; EVAL the first time a server lacks it, which
        loads it there)."""
        try:
            return self.command("EVALSHA", _sha1(text), len(keys), *keys, *args)
        except NoScriptError:
            return self.command("EVAL", text, len(keys), *keys, *args)

    def add(self, key: Any, value: Any, timeout: Any) -> bool:
        if timeout == 0:  # Django's own dance: set if absent, then delete at once
            return bool(super().add(key, value, timeout))
        expiry = [] if timeout is None else ["EX", timeout]
        return self.command("SET", key, self._serializer.dumps(value), "NX", *expiry) is not None  # type: ignore[attr-defined]

    def get(self, key: Any, default: Any) -> Any:
        value = self.command("GET", key)
        return default if value is None else self._serializer.loads(value)  # type: ignore[attr-defined]

    def add_or_get(self, key: Any, value: Any, timeout: float | None) -> tuple[bool, Any]:
        """`add`, and when the key was there already its value, in one round trip (SET NX GET,
        Redis 7); before Redis 7, `add` then `get`."""
        if not self._set_nx_get:
            return (True, None) if self.add(key, value, timeout) else (False, self.get(key, None))
        try:
            expiry = [] if timeout is None else ["EX", timeout]
            old = self.command("SET", key, self._serializer.dumps(value), "NX", "GET", *expiry)  # type: ignore[attr-defined]
        except ResponseError:  # a server before 7.0 refuses NX with GET
            self._set_nx_get = False
            return self.add_or_get(key, value, timeout)
        return (True, None) if old is None else (False, self._serializer.loads(old))  # type: ignore[attr-defined]

    def _thread_connection(self) -> Any:
        """This thread's connection, connected and with nothing to read: as redis-py's pool
        checks one it lends, a connection the server closed (a restart, an idle timeout) or
        that holds an unread reply is opened again."""
        local = self._local
        connection = getattr(local, "connection", None)
        if connection is None or local.pid != os.getpid():  # a forked child opens its own
            pool = self._get_connection_pool(True)  # type: ignore[attr-defined]
            connection = local.connection = pool.connection_class(**pool.connection_kwargs)
            local.pid = os.getpid()
        try:
            connection.connect()  # nothing to do when connected
            if connection.can_read():
                raise ConnectionError("Connection has data")
        except (ConnectionError, TimeoutError, OSError):
            connection.disconnect()
            connection.connect()
        return connection


@functools.cache
def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 (Redis names scripts so)


class HoldpointRedisCache(RedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusingRedisCacheClient

    def add_or_get(self, key: str, value: Any, timeout: int) -> tuple[bool, Any]:
        """Whether `value` was stored under `key` (it was absent), and else the value there."""
        key = self.make_and_validate_key(key)
        return self.client.add_or_get(key, value, self.get_backend_timeout(timeout))

    @property
    def client(self) -> ReusingRedisCacheClient:
        """Django's client of this cache (RedisCache._cache, private in django-stubs)."""
        return self._cache  # type: ignore[return-value]


def add_or_get(cache: Any, key: str, value: Any, timeout: int) -> tuple[bool, Any]:
    """Store `value` under `key` if it is absent: (True, None); else (False, the value there).
    One round trip on Holdpoint's Redis cache, `add` then `get` on any other."""
    own = getattr(cache, "add_or_get", None)  # django.core.cache.cache is a proxy of the cache
    if own is not None:
        return own(key, value, timeout)  # type: ignore[no-any-return]
    if cache.add(key, value, timeout=timeout):
        return True, None
    return False, cache.get(key)
