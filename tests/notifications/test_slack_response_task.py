"""The task that updates a Slack message through its response_url (a credential: valid 30
minutes, 5 uses, and anyone holding it may rewrite the message)."""

from __future__ import annotations

import logging
import socket

import pytest

from notifications.tasks import slack_response_send

pytestmark = pytest.mark.usefixtures("allow_private")

SECRET_PART = "T0HOLDPT/1234567890/aSecretResponseUrlPart"


def closed_port() -> int:
    """A local port nobody listens on: every try is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_when_slack_stays_unreachable_the_tries_end_and_the_url_is_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/actions/{SECRET_PART}"
    caplog.set_level(logging.DEBUG)
    result = slack_response_send.apply(args=[url, {"text": "Approved by rita"}])
    assert result.successful(), result.traceback
    assert result.result is None  # given up: nothing was sent
    logged = caplog.text + "".join(f"{record.exc_info}" for record in caplog.records)
    assert "given up after 3 tries: no answer" in logged
    assert SECRET_PART not in logged  # Celery's MaxRetriesExceededError wrote the args in its message
    assert SECRET_PART not in f"{result.result} {result.traceback}"


def test_the_enqueued_task_shows_the_worker_no_url_in_place_of_its_args(monkeypatch: pytest.MonkeyPatch) -> None:
    from notifications.slack import Press, reply_enqueue

    enqueued: list[dict[str, object]] = []
    monkeypatch.setattr(slack_response_send, "apply_async", lambda **options: enqueued.append(options))
    url = f"http://127.0.0.1:{closed_port()}/actions/{SECRET_PART}"
    reply_enqueue(Press("T0HOLDPT", "U0RITA", "holdpoint.approve", url), {"text": "Approved by rita"})
    [options] = enqueued
    assert options["args"] == [url, {"text": "Approved by rita"}]
    # What Celery's trace and events write for the args (its log records carry them even at INFO).
    assert SECRET_PART not in str(options["argsrepr"])
