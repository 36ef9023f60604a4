"""What a request's rows cost the database beyond their own writes: the rows it writes point at
their team and tool with no foreign-key constraint (accounts.models.Team says why), and keep the
constraints to their step, a row the request has locked itself."""

from __future__ import annotations

import pytest
from django.db import connection, models

from envelopes.audit_log import AuditEvent
from envelopes.events import DomainEvent
from envelopes.models import Attempt, Envelope, IdempotencyRecord, SkippedResource, Step
from notifications.models import Notice, Watch
from policy.models import RuleAct
from webhooks.models import OutboxMessage

pytestmark = pytest.mark.django_db

UNCONSTRAINED = [
    (Step, "team"),
    (Step, "tool"),
    (Envelope, "team"),
    (Envelope, "tool"),
    (AuditEvent, "team"),
    (AuditEvent, "tool"),
    (DomainEvent, "team"),
    (IdempotencyRecord, "team"),
    (SkippedResource, "team"),
    (OutboxMessage, "team"),
    (Notice, "team"),
    (Watch, "team"),
    (RuleAct, "team"),
]

CONSTRAINED = [
    (Envelope, "step"),
    (AuditEvent, "step"),
    (DomainEvent, "step"),
    (Attempt, "step"),
    (OutboxMessage, "step"),
]


def references(model: type[models.Model]) -> dict[str, tuple[str, str]]:
    """The model's foreign-key constraints in the database: its column -> (table, column)."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return {info["columns"][0]: info["foreign_key"] for info in constraints.values() if info["foreign_key"]}


@pytest.mark.parametrize(("model", "name"), UNCONSTRAINED, ids=lambda value: getattr(value, "__name__", value))
def test_a_request_row_points_at_its_team_and_tool_without_a_constraint(model: type[models.Model], name: str) -> None:
    column = model._meta.get_field(name).column
    assert column not in references(model)


@pytest.mark.parametrize(("model", "name"), CONSTRAINED, ids=lambda value: getattr(value, "__name__", value))
def test_a_request_row_keeps_its_constraint_to_its_step(model: type[models.Model], name: str) -> None:
    column = model._meta.get_field(name).column
    assert references(model)[column] == (Step._meta.db_table, "id")
