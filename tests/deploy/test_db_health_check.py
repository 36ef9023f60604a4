"""Persistent PostgreSQL connections are checked before each request uses them
(CONN_HEALTH_CHECKS), without a round trip while nothing has come from the server
(config/postgresql): a connection the server closed between two calls is replaced, and no call
fails for it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings
from django.db import connection, connections
from django.db.backends.postgresql import base as django_postgresql

from accounts.services import api_key_create, team_create
from config.postgresql import base as holdpoint_postgresql
from tests import worker
from tests.deploy.deployment import admin_connection, base_environment, gunicorn

CALLS = 24  # each on a new connection, so that every worker takes some

pytestmark = pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3",
    reason="PostgreSQL's persistent connections (CI runs on PostgreSQL)",
)


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_connections_postgresql_closed_answers_every_call() -> None:
    created = api_key_create(team=team_create(slug="acme"), name="agent")
    # No CACHE_URL: each call's first statement is the key's read, one of the hot statements
    # (envelopes/modelsql.py), which had skipped the check.
    env = base_environment(worker.test_database_url(), HOLDPOINT_HTTPS="false")
    headers = {"Authorization": f"Bearer {created.raw}"}
    with gunicorn(env, workers=2) as url:
        before = [httpx.get(f"{url}/api/v1/steps", headers=headers, timeout=30).status_code for _ in range(CALLS)]
        terminated = _terminate_the_others()
        after = [httpx.get(f"{url}/api/v1/steps", headers=headers, timeout=30).status_code for _ in range(CALLS)]

    assert before == [200] * CALLS
    assert terminated >= 2  # each worker's connection
    assert after == [200] * CALLS


@pytest.fixture
def parent_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """The answers of Django's own check (`SELECT 1`), each time it runs."""
    answers: list[bool] = []
    original = django_postgresql.DatabaseWrapper.is_usable

    def counted(self: django_postgresql.DatabaseWrapper) -> bool:
        answers.append(original(self))
        return answers[-1]

    monkeypatch.setattr(django_postgresql.DatabaseWrapper, "is_usable", counted)
    yield answers


@pytest.mark.django_db(transaction=True)
def test_an_idle_connection_is_checked_without_a_statement_and_a_closed_one_is_replaced(
    parent_checks: list[bool],
) -> None:
    assert isinstance(connections["default"], holdpoint_postgresql.DatabaseWrapper)
    connection.ensure_connection()
    raw = connection.connection

    connection.health_check_done = False
    connection.close_if_health_check_failed()
    assert parent_checks == []  # nothing came from the server: usable, no SELECT 1
    assert connection.connection is raw

    with admin_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [raw.info.backend_pid])
    deadline = time.monotonic() + 5
    while not holdpoint_postgresql._readable(raw.fileno()) and time.monotonic() < deadline:
        time.sleep(0.01)
    connection.health_check_done = False
    connection.close_if_health_check_failed()

    assert parent_checks == [False]  # the server's farewell was read, and the check failed
    assert connection.connection is None  # closed; the next statement opens a new one
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def _terminate_the_others() -> int:
    """Terminate every other session on this test database (the gunicorn workers'), as a
    PostgreSQL restart or a pooler's idle timeout would; how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (count,) = cursor.fetchone()
    time.sleep(0.2)  # the terminated sessions' farewells reach their sockets
    return int(count)
