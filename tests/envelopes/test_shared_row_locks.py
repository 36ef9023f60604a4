"""A request does not wait for a lock on its team's or its tool's row: the audit seal and a tool's
registration hold the team's row FOR UPDATE, a halt holds the tool's, and the rows a request
writes point at both without a database constraint, whose check would lock them FOR KEY SHARE
(accounts.models.Team). Two real connections on PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, models, transaction

from accounts.models import Team
from envelopes.models import Tool
from tests.conftest import AgentClient, error_envelope, fingerprint

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and their waits are PostgreSQL's"),
]


def _holding(row: models.Model, locked: threading.Event, release: threading.Event) -> threading.Thread:
    """A thread whose transaction holds `row` FOR UPDATE until `release` (at most 20 s)."""

    def holder() -> None:
        try:
            with transaction.atomic():
                type(row)._default_manager.select_for_update().get(pk=row.pk)
                locked.set()
                release.wait(20)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    return thread


@pytest.mark.parametrize("held", ["team", "tool"])
def test_a_request_does_not_wait_for_a_lock_on_its_teams_or_tools_row(
    agent: AgentClient, team: Team, held: str
) -> None:
    assert agent.envelope(error_envelope(operation_ref="first")).status_code == 201  # registers the tool
    row: models.Model = team if held == "team" else Tool.objects.get(team=team, name="send_email")
    locked, release = threading.Event(), threading.Event()
    thread = _holding(row, locked, release)
    answers: list[Any] = []
    try:
        assert locked.wait(10)
        with connection.cursor() as cursor:  # a wait fails the request instead of hanging the test
            cursor.execute("SET lock_timeout = '2s'")
        answers.append(agent.envelope(error_envelope(operation_ref="while-held")))
        answers.append(agent.attempt("granted-while-held", tool="send_email", fingerprint=fingerprint("a")))
    finally:
        release.set()
        thread.join(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    assert [answer.status_code for answer in answers] == [201, 201], [answer.content for answer in answers]
    assert not thread.is_alive()
