"""The throttle's one Redis command (limits.throttle): it counts the window's hits and the
window's key expires soon after the window, set by the hit that created it."""

from __future__ import annotations

import uuid

import pytest
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

from limits import throttle


@pytest.fixture
def redis_client():  # type: ignore[no-untyped-def]
    backend = caches["default"]
    if not isinstance(backend, RedisCache):
        # The embedded default counts windows in a table (tests/envelopes cover it); CI sets Redis.
        pytest.skip("the Redis script needs CACHE_URL=redis://… (the CI and bench settings)")
    return backend, backend._cache.get_client(None, write=True)  # type: ignore[attr-defined]


def test_hits_are_counted_and_the_window_key_expires_after_the_window(redis_client) -> None:  # type: ignore[no-untyped-def]
    backend, client = redis_client
    key = f"test:{uuid.uuid4().hex}"

    hits = [throttle.window_hit(key, 7, 60) for _ in range(3)]

    assert hits == [1, 2, 3]
    stored = backend.make_and_validate_key(f"throttle:{key}:7")
    assert 0 < client.ttl(stored) <= 61
    assert throttle.window_hit(key, 8, 60) == 1  # the next window starts over


def test_a_later_hit_does_not_push_the_expiry_back(redis_client) -> None:  # type: ignore[no-untyped-def]
    """Only the hit that creates the key sets its expiry."""
    backend, client = redis_client
    key = f"test:{uuid.uuid4().hex}"
    throttle.window_hit(key, 1, 60)
    stored = backend.make_and_validate_key(f"throttle:{key}:1")
    client.expire(stored, 5)

    throttle.window_hit(key, 1, 60)

    assert 0 < client.ttl(stored) <= 5
