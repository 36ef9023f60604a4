"""Deleting a team deletes what its requests wrote, and a tool with steps cannot be deleted: the
rows a request writes point at their team and tool without a database constraint
(accounts.models.Team), so Django's collector is what keeps these true, on either database."""

from __future__ import annotations

import pytest
from django.db.models.deletion import RestrictedError

from accounts.models import Team
from envelopes.audit_log import AuditEvent
from envelopes.events import DomainEvent
from envelopes.models import Envelope, IdempotencyRecord, Step, Tool
from tests.conftest import AgentClient, error_envelope
from webhooks.models import OutboxMessage
from webhooks.services import endpoint_create

pytestmark = pytest.mark.django_db

# The tables a keyed ingest writes, each pointing at its team without a constraint.
WRITTEN = [Step, Envelope, AuditEvent, DomainEvent, IdempotencyRecord, OutboxMessage]


def counts(team: Team) -> dict[str, int]:
    return {model.__name__: model._default_manager.filter(team_id=team.pk).count() for model in WRITTEN}


@pytest.fixture
def written(team: Team, other_team: Team, agent: AgentClient, other_agent: AgentClient, settings) -> None:  # type: ignore[no-untyped-def]
    """Each team, with a webhook endpoint, has sent a keyed envelope: a row in each WRITTEN table."""
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    for each, client in ((team, agent), (other_team, other_agent)):
        endpoint_create(team=each, url="http://127.0.0.1:9/hook")
        answer = client.envelope(error_envelope(), HTTP_IDEMPOTENCY_KEY="k-1")
        assert answer.status_code == 201, answer.content
        assert all(counts(each).values()), counts(each)


def test_deleting_a_team_deletes_the_rows_its_requests_wrote(team: Team, other_team: Team, written: None) -> None:
    kept = counts(other_team)
    team_id = team.pk

    team.delete()

    assert counts(Team(pk=team_id)) == dict.fromkeys(kept, 0)
    assert counts(other_team) == kept


def test_a_tool_with_steps_cannot_be_deleted(team: Team, written: None) -> None:
    tool = Tool.objects.get(team=team, name="send_email")

    with pytest.raises(RestrictedError):
        tool.delete()

    assert Step.objects.filter(tool=tool).exists()
