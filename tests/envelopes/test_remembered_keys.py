"""A web process remembers the API keys it has read, checked against a token in Redis on every
call (accounts.auth): a call with a known key reads no SQL, and a revoked key answers 401 on
its next call all the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import time_machine
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts import auth
from accounts.models import ApiKey, Team
from accounts.services import api_key_create, api_keys_revoke
from limits import throttle
from tests.conftest import AgentClient, error_envelope

pytestmark = pytest.mark.django_db

REDIS = {"default": {"BACKEND": "config.cache.HoldpointRedisCache", "LOCATION": "redis://127.0.0.1:6379/14"}}


@pytest.fixture(autouse=True)
def redis_cache(settings: Any) -> Iterator[None]:
    """Holdpoint's Redis cache (a database of its own), as production runs with CACHE_URL."""
    settings.CACHES = REDIS
    cache.clear()
    auth._known.clear()
    yield
    cache.clear()
    auth._known.clear()


def key_reads(agent: AgentClient, **envelope: Any) -> tuple[int, int]:
    """(the call's status, how many times it read an API key from the database)."""
    with CaptureQueriesContext(connection) as queries:
        status = agent.envelope(error_envelope(**envelope)).status_code
    return status, sum('"envelopes_apikey"' in query["sql"] for query in queries.captured_queries)


def test_a_known_key_is_not_read_again(agent: AgentClient) -> None:
    assert key_reads(agent, operation_ref="a") == (201, 1)
    assert key_reads(agent, operation_ref="b") == (201, 0)
    assert key_reads(agent, operation_ref="c") == (201, 0)


def test_a_revoked_key_answers_401_on_its_next_call(agent: AgentClient, team: Team) -> None:
    assert key_reads(agent, operation_ref="a") == (201, 1)
    assert api_keys_revoke(ApiKey.objects.filter(team=team)) == 1
    refused = agent.envelope(error_envelope(operation_ref="b"))
    assert refused.status_code == 401
    assert refused.json()["detail"] == "Unknown or revoked API key."


def test_a_change_made_by_another_process_is_read_on_the_next_call(agent: AgentClient, team: Team) -> None:
    """Another process renews the token (it revoked a key, renamed one): this one reads again."""
    assert key_reads(agent, operation_ref="a") == (201, 1)
    throttle.token_renew(auth.KEYS_TOKEN)
    assert key_reads(agent, operation_ref="b") == (201, 1)
    assert key_reads(agent, operation_ref="c") == (201, 0)


def test_a_key_renamed_or_a_team_saved_renews_the_token(agent: AgentClient, team: Team) -> None:
    before = throttle.token_read(auth.KEYS_TOKEN)
    key = ApiKey.objects.get(team=team)
    key.name = "renamed"
    key.save(update_fields=["name"])
    renamed = throttle.token_read(auth.KEYS_TOKEN)
    team.name = "Acme Inc."
    team.save()
    assert len({before, renamed, throttle.token_read(auth.KEYS_TOKEN)}) == 3


def test_a_new_key_renews_nothing(team: Team) -> None:
    before = throttle.token_read(auth.KEYS_TOKEN)
    api_key_create(team=team, name="another")
    assert throttle.token_read(auth.KEYS_TOKEN) == before


def test_a_flushed_redis_forgets_the_token_and_every_key_is_read_again(agent: AgentClient) -> None:
    assert key_reads(agent, operation_ref="a") == (201, 1)
    cache.clear()
    assert key_reads(agent, operation_ref="b") == (201, 1)
    assert key_reads(agent, operation_ref="c") == (201, 0)


def test_a_key_is_remembered_for_at_most_known_for_s(agent: AgentClient, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(auth, "_clock", lambda: now[0])
    assert key_reads(agent, operation_ref="a") == (201, 1)
    now[0] += auth.KNOWN_FOR_S - 0.1
    assert key_reads(agent, operation_ref="b") == (201, 0)
    now[0] += 0.2
    assert key_reads(agent, operation_ref="c") == (201, 1)


def test_a_revocation_redis_did_not_hear_of_holds_within_known_for_s(
    agent: AgentClient, team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound the README states: had Redis been out of reach when the key was revoked, a
    process that remembers it accepts it until KNOWN_FOR_S from its read, not longer."""
    now = [1000.0]
    monkeypatch.setattr(auth, "_clock", lambda: now[0])
    assert key_reads(agent, operation_ref="a") == (201, 1)
    with monkeypatch.context() as unreachable:
        unreachable.setattr(auth, "token_renew", lambda token: False)
        api_keys_revoke(ApiKey.objects.filter(team=team))
    assert key_reads(agent, operation_ref="b") == (201, 0)
    now[0] += auth.KNOWN_FOR_S
    assert agent.envelope(error_envelope(operation_ref="c")).status_code == 401


def test_with_redis_down_every_call_reads_its_key(agent: AgentClient, settings: Any) -> None:
    assert key_reads(agent, operation_ref="a") == (201, 1)
    settings.CACHES = {
        "default": {
            "BACKEND": "config.cache.HoldpointRedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens on port 1
            "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
        }
    }
    try:
        assert key_reads(agent, operation_ref="b") == (201, 1)
        assert key_reads(agent, operation_ref="c") == (201, 1)
    finally:
        throttle._redis_down_until = 0.0
        settings.CACHES = REDIS


def test_without_the_redis_cache_every_call_reads_its_key(agent: AgentClient, settings: Any) -> None:
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "holdpoint_cache"}
    }
    assert key_reads(agent, operation_ref="a") == (201, 1)
    assert key_reads(agent, operation_ref="b") == (201, 1)


def test_a_known_key_is_counted_once_per_call_by_the_throttle(agent: AgentClient, settings: Any) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api_key": "3/hour"}}
    from rest_framework.settings import api_settings

    api_settings.reload()
    mid_hour = timezone.now().replace(minute=30, second=0, microsecond=0)
    try:
        with time_machine.travel(mid_hour, tick=False):  # all in one window
            statuses = [agent.envelope(error_envelope(operation_ref=f"t{index}")).status_code for index in range(5)]
    finally:
        api_settings.reload()
    assert statuses == [201, 201, 201, 429, 429]


def test_remembered_keys_answer_for_their_own_team(agent: AgentClient, other_agent: AgentClient) -> None:
    for index in range(3):
        assert agent.envelope(error_envelope(operation_ref=f"ours-{index}")).status_code == 201
        assert other_agent.envelope(error_envelope(operation_ref=f"theirs-{index}")).status_code == 201
    ours = {step["operation_ref"] for step in agent.get("/api/v1/steps").json()["results"]}
    theirs = {step["operation_ref"] for step in other_agent.get("/api/v1/steps").json()["results"]}
    assert ours == {f"ours-{index}" for index in range(3)}
    assert theirs == {f"theirs-{index}" for index in range(3)}
