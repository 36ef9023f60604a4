"""config.cache: each thread's own Redis connection, for the throttle's script and the cache's
`add` (the webhook delivery's mark, Slack's replay guard). It answers as Django's Redis cache
does, and survives what a pooled connection survives: a server that closed it, a server that
lost its scripts, a forked child."""

from __future__ import annotations

import os
import uuid

import pytest
from django.core.cache import caches
from redis.exceptions import ResponseError

from config.cache import HoldpointRedisCache, add_or_get
from limits import throttle


@pytest.fixture
def redis_cache() -> HoldpointRedisCache:
    backend = caches["default"]
    if not isinstance(backend, HoldpointRedisCache):
        # The embedded default has no Redis; CI and the bench set CACHE_URL=redis://….
        pytest.skip("needs CACHE_URL=redis://… (the CI and bench settings)")
    return backend


def test_add_sets_only_an_absent_key_with_its_expiry_and_reads_back_as_django_wrote_it(
    redis_cache: HoldpointRedisCache,
) -> None:
    key, other = f"test:{uuid.uuid4().hex}", f"test:{uuid.uuid4().hex}"

    first = redis_cache.add(key, 1, timeout=30)
    second = redis_cache.add(key, 2, timeout=30)
    structured = redis_cache.add(other, {"delivery": [1, 2]}, timeout=None)

    assert (first, second, structured) == (True, False, True)
    assert redis_cache.get(key) == 1
    assert redis_cache.get(other) == {"delivery": [1, 2]}
    pooled = redis_cache.client.get_client(write=True)
    assert 0 < pooled.ttl(redis_cache.make_key(key)) <= 30
    assert pooled.ttl(redis_cache.make_key(other)) == -1  # no expiry
    redis_cache.delete(key)
    assert redis_cache.add(key, 3, timeout=30) is True


def test_add_or_get_stores_an_absent_key_or_answers_the_value_that_stands(redis_cache: HoldpointRedisCache) -> None:
    key = f"test:{uuid.uuid4().hex}"

    first = add_or_get(redis_cache, key, 1.5, timeout=30)
    second = add_or_get(redis_cache, key, 2.5, timeout=30)

    assert (first, second) == ((True, None), (False, 1.5))
    assert redis_cache.get(key) == 1.5  # written as Django's own set would write it
    pooled = redis_cache.client.get_client(write=True)
    assert 0 < pooled.ttl(redis_cache.make_key(key)) <= 30
    redis_cache.set(key, {"ends": 3}, timeout=30)  # and reads what Django's own set wrote
    assert add_or_get(redis_cache, key, 4, timeout=30) == (False, {"ends": 3})


def test_add_or_get_on_a_server_before_redis_7_adds_then_gets(
    redis_cache: HoldpointRedisCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis_cache.client
    sent = client.command

    def before_7(*args: object) -> object:
        if "NX" in args and "GET" in args:
            raise ResponseError("syntax error")  # what Redis 6 answers to SET ... NX GET
        return sent(*args)

    monkeypatch.setattr(client, "command", before_7)
    monkeypatch.setattr(client, "_set_nx_get", True)
    key = f"test:{uuid.uuid4().hex}"

    assert add_or_get(redis_cache, key, 1, timeout=30) == (True, None)
    assert add_or_get(redis_cache, key, 2, timeout=30) == (False, 1)
    assert client._set_nx_get is False  # asked once, not at every call


def test_a_connection_the_server_closed_is_opened_again_without_losing_the_call(
    redis_cache: HoldpointRedisCache,
) -> None:
    key = f"test:{uuid.uuid4().hex}"
    assert throttle.window_hit(key, 1, 60) == 1
    client_id = redis_cache.client.command("CLIENT", "ID")

    killed = redis_cache.client.get_client(write=True).client_kill_filter(_id=client_id)

    assert killed == 1
    assert throttle.window_hit(key, 1, 60) == 2  # counted, not "Redis down"
    assert redis_cache.client.command("CLIENT", "ID") != client_id


def test_a_server_that_lost_its_scripts_loads_them_again(redis_cache: HoldpointRedisCache) -> None:
    key = f"test:{uuid.uuid4().hex}"
    assert throttle.window_hit(key, 1, 60) == 1

    redis_cache.client.get_client(write=True).script_flush()

    assert throttle.window_hit(key, 1, 60) == 2
    assert throttle.window_hit(key, 1, 60) == 3


def test_a_forked_child_opens_its_own_connection(redis_cache: HoldpointRedisCache) -> None:
    """Celery's prefork pool and gunicorn fork: two processes writing one socket would read
    each other's replies."""
    parent_id = redis_cache.client.command("CLIENT", "ID")
    read_end, write_end = os.pipe()

    pid = os.fork()
    if pid == 0:  # the child
        try:
            child_id = redis_cache.client.command("CLIENT", "ID")
            os.write(write_end, str(child_id).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    child_id = int(os.read(read_end, 64))
    os.waitpid(pid, 0)
    os.close(read_end)

    assert child_id != parent_id
    assert redis_cache.client.command("CLIENT", "ID") == parent_id  # the parent's is untouched
