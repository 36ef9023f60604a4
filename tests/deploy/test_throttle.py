"""The per-key API throttle (contract §4: 429 with Retry-After): a fixed window counted
atomically where every web process sees it, and during a Redis outage in the database."""

from __future__ import annotations

import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import ApiKey
from accounts.services import api_key_create, api_keys_revoke, team_create
from config import cache as config_cache
from limits import throttle
from limits.models import ThrottleWindow
from tests import worker
from tests.conftest import AgentClient, error_envelope
from tests.deploy.deployment import gunicorn

LIMIT = 20
CALLS = 60


def cache_choices() -> list[Any]:
    """The database table always; Redis too when the suite runs with a Redis cache (CI)."""
    url = settings.CACHES["default"].get("LOCATION", "")
    # The id is the kind, not the URL: each pytest-xdist worker has a Redis database of its own.
    return ["database", pytest.param(url, id="redis")] if str(url).startswith("redis") else ["database"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cache_url", cache_choices())
def test_four_gunicorn_workers_together_admit_exactly_the_limit(cache_url: str) -> None:
    raw_key = api_key_create(team=team_create(slug="acme"), name="agent").raw
    env = {
        "PATH": "/usr/bin:/bin",
        "DATABASE_URL": worker.test_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SECRET_KEY": "throttle-test-key-not-a-secret-padded-to-fifty-characters",
        "ALLOWED_HOSTS": "127.0.0.1",
        "HOLDPOINT_HTTPS": "false",
        "HOLDPOINT_API_RATE": f"{LIMIT}/hour",
    }
    if cache_url != "database":
        env["CACHE_URL"] = cache_url
        # Another test's window for the same key id must not count here.
        from django.core.cache import cache

        cache.clear()
    wait_for_a_whole_window(3600)

    headers = {"Authorization": f"Bearer {raw_key}"}
    with gunicorn(env, workers=4) as url:

        def call(_: int) -> int:
            return httpx.get(f"{url}/api/v1/steps", headers=headers, timeout=30).status_code

        with ThreadPoolExecutor(max_workers=16) as pool:
            statuses = list(pool.map(call, range(CALLS)))
        throttled = httpx.get(f"{url}/api/v1/steps", headers=headers)

    assert statuses.count(200) == LIMIT
    assert statuses.count(429) == CALLS - LIMIT
    assert 1 <= int(throttled.headers["Retry-After"]) <= 3600
    assert throttled.json()["code"] == "throttled"


def wait_for_a_whole_window(length_s: int) -> None:
    """Start with more than a minute left in the window, so the calls all fall in one."""
    left = length_s - time.time() % length_s
    if left < 60:
        time.sleep(math.ceil(left))


@pytest.fixture
def redis_down(agent: AgentClient, settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """After `agent` (whose set-up clears the cache), the cache points where Redis is not."""
    settings.CACHES = {
        "default": {
            "BACKEND": "config.cache.HoldpointRedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
            "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
        }
    }
    monkeypatch.setattr(throttle, "_redis_down_until", 0.0)
    monkeypatch.setattr(throttle, "_last_warning", 0.0)
    monkeypatch.setattr(config_cache, "_redis_down_until", {})


@pytest.mark.django_db
def test_with_redis_down_calls_are_counted_in_the_database_and_one_warning_is_logged(
    redis_down: None, agent: AgentClient, caplog: Any
) -> None:
    with caplog.at_level(logging.WARNING, logger="holdpoint.throttle"):
        listed = [agent.get("/api/v1/steps").status_code for _ in range(5)]
        posted = agent.envelope(error_envelope())

    assert listed == [200] * 5
    assert posted.status_code == 201, posted.content
    assert sum(ThrottleWindow.objects.values_list("hits", flat=True)) == 6
    warnings = [record.getMessage() for record in caplog.records if record.name == "holdpoint.throttle"]
    assert len(warnings) == 1
    assert "cannot be reached" in warnings[0] and "counted in the database" in warnings[0]


@pytest.mark.django_db
def test_with_redis_down_the_limit_still_holds(redis_down: None, agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api_key": "3/hour"}}
    from rest_framework.settings import api_settings

    api_settings.reload()
    wait_for_a_whole_window(3600)

    statuses = [agent.get("/api/v1/steps").status_code for _ in range(5)]

    assert statuses == [200, 200, 200, 429, 429]


def key_and_window_statements(call: Any) -> list[str]:
    """The statements `call()` ran that read an API key or count a throttle window."""
    with CaptureQueriesContext(connection) as queries:
        call()
    return [
        query["sql"]
        for query in queries.captured_queries
        if '"envelopes_apikey"' in query["sql"] or '"limits_throttlewindow"' in query["sql"]
    ]


@pytest.mark.django_db
def test_with_redis_down_a_call_reads_its_key_and_counts_its_window_in_one_statement(
    redis_down: None, agent: AgentClient
) -> None:
    statuses: list[int] = []
    for _ in range(3):  # the third run of a statement is the first prepared one
        statements = key_and_window_statements(lambda: statuses.append(agent.get("/api/v1/steps").status_code))
        if connection.vendor == "postgresql":
            assert len(statements) == 1, statements
            assert '"envelopes_apikey"' in statements[0] and '"limits_throttlewindow"' in statements[0]
        else:  # SQLite has no data-modifying CTE: the read, then the upsert
            assert len(statements) == 2, statements

    assert statuses == [200] * 3
    assert list(ThrottleWindow.objects.values_list("hits", flat=True)) == [3]


@pytest.mark.django_db
def test_with_redis_down_an_unknown_or_revoked_key_is_refused_and_counts_nothing(
    redis_down: None, agent: AgentClient, team: Any
) -> None:
    unknown = AgentClient("hp_" + "x" * 40)
    assert unknown.get("/api/v1/steps").status_code == 401
    assert not ThrottleWindow.objects.exists()

    assert agent.get("/api/v1/steps").status_code == 200
    api_keys_revoke(ApiKey.objects.filter(team=team))
    assert agent.get("/api/v1/steps").status_code == 401
    assert list(ThrottleWindow.objects.values_list("hits", flat=True)) == [1]


@pytest.mark.django_db
def test_a_redis_that_failed_is_not_tried_again_for_a_while(redis_down: None) -> None:
    """One refused connection, and no other connection of the process tries for
    RETRY_REDIS_AFTER_S: each cache call meanwhile fails at once."""
    from django.core.cache import cache

    attempts: list[float] = []
    real_connect = redis.Connection._connect

    def counted(self: redis.Connection) -> Any:
        attempts.append(time.monotonic())
        return real_connect(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redis.Connection, "_connect", counted)
        for _ in range(20):
            with pytest.raises(redis.ConnectionError):
                cache.get("anything")
        assert len(attempts) == 1
        assert config_cache.redis_down("127.0.0.1", 1)
        assert not config_cache.redis_down("127.0.0.1", 6379)  # another server is tried as ever
        config_cache._redis_down_until.clear()  # the interval is over
        with pytest.raises(redis.ConnectionError):
            cache.add("anything", 1, 5)
        assert len(attempts) == 2


@pytest.mark.django_db
def test_the_database_window_restarts_its_count_in_the_next_window(settings) -> None:  # type: ignore[no-untyped-def]
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "holdpoint_cache"}
    }

    first = [throttle.window_hit("api_key:1", 100, 60) for _ in range(3)]
    later = [throttle.window_hit("api_key:1", 101, 60) for _ in range(2)]
    other = throttle.window_hit("api_key:2", 101, 60)

    assert first == [1, 2, 3]
    assert later == [1, 2]
    assert other == 1
