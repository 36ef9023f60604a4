"""`modelsql.new(model, **values)` builds what `model(**values)` builds (the hot path's rows:
a new step, its audit links, its attempt, its domain events), tested over the core's models."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import time_machine
from django.db import models
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts.models import Team
from envelopes import modelsql
from envelopes.events import DomainEvent
from envelopes.models import Attempt, AuditEvent, Decision, Envelope, ProposedInput, Step, Tool

BUILT = [Step, Envelope, Attempt, ProposedInput, AuditEvent, DomainEvent, Decision]
SIMPLE = st.none() | st.booleans() | st.integers(0, 2**31 - 1) | st.text(max_size=8)


def _related(field: models.ForeignKey[Any, Any], pk: int) -> models.Model:
    model = field.related_model
    assert isinstance(model, type)
    instance = model(pk=pk)
    if model in (Tool, Step):
        instance.team = Team(pk=pk, slug=f"t{pk}")  # type: ignore[attr-defined]
    return instance


@st.composite
def _given(draw: st.DrawFn, model: type[models.Model]) -> dict[str, Any]:
    """Some of the model's columns: a value by attname, or a foreign key's object by its name."""
    values: dict[str, Any] = {}
    for field in model._meta.concrete_fields:
        if not draw(st.booleans()):
            continue  # left to its default
        if isinstance(field, models.ForeignKey) and draw(st.booleans()):
            values[field.name] = draw(st.none() | st.integers(1, 9).map(functools.partial(_related, field)))
        else:
            values[field.attname] = draw(SIMPLE)
    return values


def _as_built(instance: models.Model) -> dict[str, Any]:
    state = instance._state
    return {
        **{key: value for key, value in vars(instance).items() if key != "_state"},
        "adding": state.adding,
        "db": state.db,
        "cached": dict(state.fields_cache),
    }


@pytest.mark.parametrize("model", BUILT, ids=lambda model: model.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_new_builds_what_the_model_builds(model: type[models.Model], data: st.DataObject) -> None:
    values = data.draw(_given(model))
    with time_machine.travel("2026-12-03T12:00:00Z", tick=False):  # the same default times
        assert _as_built(modelsql.new(model, **dict(values))) == _as_built(model(**values))


def test_new_refuses_what_is_not_a_column() -> None:
    with pytest.raises(TypeError, match="held_for"):
        modelsql.new(Step, held_for="finance")  # a property of Step, not a column
