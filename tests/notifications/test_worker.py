"""Notifications on a real Celery worker with beat: the first held step is announced at once
(the on-commit enqueue), the rest in one digest when the batching window ends (beat's sweep)."""

from __future__ import annotations

import json
import time

import pytest

from accounts.models import Team
from envelopes import services
from notifications.models import Message
from notifications.services import channel_create
from tests.notifications.conftest import SlackReceiver, approval_envelope
from tests.worker import Worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker, pytest.mark.usefixtures("allow_private")]


@pytest.fixture(autouse=True)
def _empty_queues() -> None:
    from config.celery import app

    app.control.purge()


def hold(team: Team, ref: str) -> None:
    body = approval_envelope(operation_ref=ref)
    services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode())


def test_the_first_goes_at_once_and_the_rest_in_one_digest_at_the_windows_end(team: Team, slack: SlackReceiver) -> None:
    channel_create(team=team, kind="slack", target=slack.url(), batch_window_s=4)
    with Worker(sweep_seconds=0.5, env={"HOLDPOINT_WEBHOOK_ALLOW_PRIVATE": "true"}):
        hold(team, "run_1/first")
        assert wait_until(lambda: len(slack.received) == 1, timeout=30)
        sent_at = time.monotonic()
        for n in range(5):
            hold(team, f"run_1/later_{n}")
        assert wait_until(lambda: len(slack.received) == 2, timeout=30)
        waited = time.monotonic() - sent_at
        time.sleep(1.5)
    assert len(slack.received) == 2
    assert 2.5 <= waited <= 10  # the window's end (4 s after the first), not at once
    slack.check()
    assert "5 × Approval requested" in json.dumps(slack.payloads()[1], ensure_ascii=False)
    assert Message.objects.filter(status=Message.Status.SENT).count() == 2


def test_sends_run_on_their_own_queue_apart_from_the_timers(team: Team, slack: SlackReceiver) -> None:
    """The documented split: `-Q celery --beat` fires timers and sends nothing; a worker on
    `notifications` sends (on commit, and beat's sweep lands on its queue)."""
    from config.celery import app

    assert app.amqp.router.route({}, "notifications.tasks.notify")["queue"].name == "notifications"
    channel_create(team=team, kind="slack", target=slack.url(), batch_window_s=0)
    env = {"HOLDPOINT_WEBHOOK_ALLOW_PRIVATE": "true"}
    with Worker(queues="celery", env=env):
        hold(team, "run_1/timers_only")
        with Worker(queues="notifications", beat=False, env=env):
            assert wait_until(lambda: len(slack.received) == 1, timeout=30)
    slack.check()
    assert Message.objects.get().status == Message.Status.SENT
