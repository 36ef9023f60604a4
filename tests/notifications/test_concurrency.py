"""Sweeps side by side (real threads; row locks on PostgreSQL, one writer at a time on SQLite):
one channel's notices become one message, and one message is sent once."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from django.db import connection

from accounts.models import Team
from envelopes import services
from notifications.models import Message, Notice
from notifications.services import channel_create, channels_flush
from notifications.tasks import notify
from tests.notifications.conftest import SlackReceiver, approval_envelope

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allow_private", "no_enqueue")]


def side_by_side(work: Callable[[], object], threads: int = 4) -> None:
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            work()
        except BaseException as error:  # surfaced below
            errors.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert errors == []


def test_flushes_side_by_side_make_one_message_and_send_it_once(team: Team, slack: SlackReceiver) -> None:
    channel_create(team=team, kind="slack", target=slack.url())
    for n in range(30):
        body = approval_envelope(operation_ref=f"race/{n}")
        services.envelope_ingest(team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode())
    assert Notice.objects.filter(status=Notice.Status.PENDING).count() == 30

    side_by_side(channels_flush)
    assert Message.objects.count() == 1
    assert Notice.objects.filter(status=Notice.Status.SENT).count() == 30

    side_by_side(notify)
    assert len(slack.received) == 1
    assert Message.objects.get().status == Message.Status.SENT
