"""The SQL writer writes what `save()` writes (issue 24).

`transitions.plan_write` writes a plan on PostgreSQL with `modelsql.insert` / `modelsql.update`
and elsewhere with `save()` of the same instances: what must stay equal between the two is
mechanical, and tested here once over the core's models rather than per business case. For
random instances (every concrete field drawn from its type, its choices, its null), the row the
SQL writer writes reads back equal to the row `save()` writes, or both refuse it (a check or a
unique constraint); the same for an UPDATE of every column and of named ones."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import DataError, IntegrityError, connection, models, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import Team
from envelopes import modelsql
from envelopes.events import DomainEvent
from envelopes.models import Attempt, AuditEvent, Decision, Envelope, ProposedInput, Step
from envelopes.step_context import tool_get_or_register

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the SQL writer is PostgreSQL's"),
]

INSERTED = [Step, Envelope, Attempt, ProposedInput, AuditEvent, DomainEvent, Decision]
UPDATED = [Step, Envelope, Attempt, ProposedInput]  # audit links, events and decisions are append-only

TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=10,
)
ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
TIMES = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2199, 12, 31), timezones=ZONES)
INTEGERS: dict[type, st.SearchStrategy[int]] = {
    models.PositiveIntegerField: st.integers(0, 2**31 - 1),
    models.IntegerField: st.integers(-(2**31), 2**31 - 1),
}


def _values(field: models.Field[Any, Any], related: dict[type, list[Any]]) -> st.SearchStrategy[Any]:
    """What a value of `field` may be, as an instance would hold it."""
    if isinstance(field, models.ForeignKey):
        choices = related[field.related_model]  # type: ignore[index]
        values: st.SearchStrategy[Any] = st.sampled_from(choices)
    elif field.choices:
        values = st.sampled_from([value for value, _ in field.flatchoices]) | TEXT.map(lambda s: s[:8])
    elif isinstance(field, models.JSONField):
        values = JSON
    elif isinstance(field, models.DateTimeField):
        values = TIMES
    elif isinstance(field, models.BooleanField):
        values = st.booleans()
    elif isinstance(field, models.FloatField):
        values = st.floats(allow_nan=False, allow_infinity=False)
    elif isinstance(field, models.IntegerField):
        values = next(strategy for kind, strategy in INTEGERS.items() if isinstance(field, kind))
    elif isinstance(field, models.CharField):
        values = TEXT.map(lambda s: s[: field.max_length]) | st.text(string.hexdigits, max_size=field.max_length)
    elif isinstance(field, models.TextField):
        values = TEXT
    else:
        raise AssertionError(f"no values for {field!r}: add its type here")
    return st.one_of(st.none(), values) if field.null else values


def _instance(draw: st.DrawFn, model: type[models.Model], related: dict[type, list[Any]], pk: int) -> dict[str, Any]:
    row: dict[str, Any] = {model._meta.pk.attname: pk}  # type: ignore[union-attr]
    for field in modelsql.column_fields(model):
        if not field.primary_key:
            row[field.attname] = draw(_values(field, related))
    return row


def _read(model: type[models.Model], pk: int, write: Any) -> Any:
    """The row `write()` leaves, read back through the ORM, or the error it raised; rolled back."""

    class Rollback(Exception):
        pass

    try:
        with transaction.atomic():
            write()
            row = model._default_manager.filter(pk=pk).values().get()
            raise Rollback(row)
    except Rollback as done:
        return done.args[0]
    except (IntegrityError, DataError) as refused:
        return type(refused)


def _by_sql(model: type[models.Model], values: dict[str, Any]) -> Any:
    instance = model(**values)
    return lambda: modelsql.execute_bound(*modelsql.insert(instance))


def _by_save(model: type[models.Model], values: dict[str, Any]) -> Any:
    return lambda: model(**values).save(force_insert=True)


@pytest.fixture
def related(team: Team, make_reviewer) -> dict[type, list[Any]]:  # type: ignore[no-untyped-def]
    """Rows for the foreign keys to point at (ids; None where a key may be null)."""
    tools = [tool_get_or_register(team=team, name=name).pk for name in ("send_email", "create_invoice")]
    step = Step.objects.create(team=team, tool_id=tools[0], operation_ref="target", state="needs_input")
    envelope = Envelope.objects.create(
        team=team,
        tool_id=tools[0],
        step=step,
        dialect="canonical",
        ok=True,
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return {
        Team: [team.pk],
        type(step.tool): tools,
        Step: [step.pk],
        Envelope: [envelope.pk],
        get_user_model(): [make_reviewer().pk],
    }


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=st.data())
def test_an_insert_by_sql_writes_what_save_writes(related: dict[type, list[Any]], data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(INSERTED))
    values = _instance(data.draw, model, related, pk=10**12)
    assert _read(model, 10**12, _by_sql(model, values)) == _read(model, 10**12, _by_save(model, values))


@SETTINGS
@given(data=st.data())
def test_an_update_by_sql_writes_what_save_writes(related: dict[type, list[Any]], data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(UPDATED))
    pk = 10**12
    first = _instance(data.draw, model, related, pk)
    then = _instance(data.draw, model, related, pk)
    columns = [field.name for field in modelsql.column_fields(model) if not field.primary_key]
    names = data.draw(st.none() | st.sets(st.sampled_from(columns), min_size=1))
    fields = None if names is None else tuple(sorted(names))

    def by_sql() -> None:
        model(**first).save(force_insert=True)
        modelsql.execute_bound(*modelsql.update(model(**then), fields))

    def by_save() -> None:
        model(**first).save(force_insert=True)
        model(**then).save(update_fields=fields)

    assert _read(model, pk, by_sql) == _read(model, pk, by_save)
