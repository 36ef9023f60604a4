"""Work an agent need not wait for runs after its answer is sent (envelopes.after_response).

The webhook delivery's enqueue (a Redis mark, then Celery's apply_async when a worker has taken
the last task) hurries a worker; the agent that caused the event gains nothing by waiting for
it, so it runs once the response is on the wire."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
import pytest
from django.db import transaction
from django.test.utils import override_settings
from pytest_django.live_server_helper import LiveServer

from accounts.models import Team
from accounts.services import api_key_create
from envelopes.after_response import later, on_commit_later
from tests.conftest import AgentClient, error_envelope
from webhooks.services import endpoint_create


def test_outside_a_request_the_work_runs_at_once() -> None:
    ran: list[int] = []
    later(lambda: ran.append(1))
    assert ran == [1]


@pytest.mark.django_db(transaction=True)
def test_the_work_waits_for_the_commit_and_is_dropped_with_a_rollback() -> None:
    ran: list[str] = []
    with transaction.atomic():
        on_commit_later(lambda: ran.append("committed"))
        assert ran == []
    assert ran == ["committed"]

    with pytest.raises(RuntimeError), transaction.atomic():
        on_commit_later(lambda: ran.append("rolled back"))
        raise RuntimeError
    assert ran == ["committed"]


# request_started runs Django's close_old_connections, which checks a connection an earlier
# test of this process left open: database access must be allowed.
@pytest.mark.django_db
def test_a_piece_that_fails_is_logged_and_the_next_still_runs(caplog: pytest.LogCaptureFixture) -> None:
    from django.core.signals import request_finished, request_started

    ran: list[int] = []

    def broken() -> None:
        raise ValueError("broker down")

    request_started.send(sender=None)
    later(broken)
    later(lambda: ran.append(1))
    assert ran == []  # still in the request
    with caplog.at_level(logging.ERROR, logger="envelopes.after_response"):
        request_finished.send(sender=None)
    assert ran == [1]
    assert "broker down" in caplog.text


# request_started runs Django's close_old_connections, which checks a connection an earlier
# test of this process left open: database access must be allowed.
@pytest.mark.django_db
def test_work_of_a_request_never_closed_runs_when_the_next_one_starts() -> None:
    from django.core.signals import request_finished, request_started

    ran: list[int] = []
    request_started.send(sender=None)
    later(lambda: ran.append(1))
    request_started.send(sender=None)  # the server never closed the first response
    assert ran == [1]
    request_finished.send(sender=None)
    assert ran == [1]


@pytest.fixture
def hooked(team: Team, settings: Any) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")  # nothing listens: no delivery here


@pytest.mark.django_db(transaction=True)  # the commit is real: its hooks run
def test_through_the_test_client_the_enqueue_has_run_when_the_call_returns(
    agent: AgentClient, hooked: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr("webhooks.outbox.enqueue_delivery", lambda: calls.append(1))
    assert agent.envelope(error_envelope()).status_code == 201
    assert calls == [1]


@pytest.mark.django_db(transaction=True)
def test_an_agent_has_its_whole_answer_before_the_delivery_is_enqueued(
    team: Team, hooked: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real WSGI server (Django's live server): the enqueue blocks the server's thread until
    the client has read the whole answer. Run before the response, it would wait out its 10 s
    for an answer not yet sent and record False."""
    raw = api_key_create(team=team, name="agent").raw
    answered = threading.Event()
    seen: list[bool] = []
    monkeypatch.setattr("webhooks.outbox.enqueue_delivery", lambda: seen.append(answered.wait(timeout=10)))
    with override_settings(SECURE_SSL_REDIRECT=False, SECURE_HSTS_SECONDS=0):
        server = LiveServer("localhost")
    try:
        response = httpx.post(
            f"{server.url}/api/v1/envelopes",
            json=error_envelope(),
            headers={"Authorization": f"Bearer {raw}"},
            timeout=30,
        )
        assert response.status_code == 201, response.text
        assert response.json()["step"]["state"]  # the whole body was read
        answered.set()
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [True]
    finally:
        server.stop()
