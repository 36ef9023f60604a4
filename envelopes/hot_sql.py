"""SQL for the hot path (envelopes.hot), written once per process from the models' own fields.

Compiling a query through the ORM costs more CPU than PostgreSQL spends answering it (issue
14's profile), so the two hot endpoints write their rows with statements whose text is built
once from `Model._meta` and whose values go through each field's `get_db_prep_save`, exactly
what the ORM sends for `save()`. A new column on a model is picked up with its default.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import connection, models
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper


def quote(name: str | None) -> str:
    assert name is not None  # a concrete field has a column
    return connection.ops.quote_name(name)


def table(model: type[models.Model]) -> str:
    return quote(model._meta.db_table)


@functools.cache
def column_fields(model: type[models.Model]) -> tuple[models.Field[Any, Any], ...]:
    return tuple(model._meta.concrete_fields)


@functools.cache
def select_list(model: type[models.Model], alias: str) -> str:
    """`alias."col", ...` in the order of `column_fields(model)`: rows for `from_row`."""
    return ", ".join(f"{alias}.{quote(field.column)}" for field in column_fields(model))


@functools.cache
def _converters(model: type[models.Model]) -> tuple[tuple[int, Any, Any], ...]:
    """The fields' own converters (a JSONField's decoding...), as the ORM's compiler applies them."""
    return tuple(
        (index, converter, field)
        for index, field in enumerate(column_fields(model))
        for converter in field.get_db_converters(connection)
    )


def from_row(model: type[models.Model], row: Sequence[Any]) -> Any:
    """A model instance from the columns `select_list` names, as the ORM would build it."""
    fields = column_fields(model)
    values = list(row[: len(fields)])
    for index, converter, field in _converters(model):
        values[index] = converter(values[index], field.get_col(field.model._meta.db_table), connection)
    return model.from_db(connection.alias, [field.attname for field in fields], values)


@functools.cache
def _insert_text(model: type[models.Model]) -> str:
    fields = column_fields(model)
    columns = ", ".join(quote(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {table(model)} ({columns}) VALUES ({placeholders})"  # noqa: S608 (names only)


@functools.cache
def _insert_text_without_pk(model: type[models.Model]) -> str:
    fields = [field for field in column_fields(model) if not field.primary_key]
    columns = ", ".join(quote(field.column) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {table(model)} ({columns}) VALUES ({placeholders})"  # noqa: S608 (names only)


@functools.cache
def _update_text(model: type[models.Model]) -> str:
    fields = [field for field in column_fields(model) if not field.primary_key]
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    assert model._meta.pk is not None
    pk = quote(model._meta.pk.column)
    return f"UPDATE {table(model)} SET {assignments} WHERE {pk} = %s"  # noqa: S608 (names only)


def _prepared(instance: models.Model, fields: Sequence[models.Field[Any, Any]]) -> list[Any]:
    return [field.get_db_prep_save(getattr(instance, field.attname), connection=connection) for field in fields]


def insert(instance: models.Model) -> tuple[str, list[Any]]:
    """The INSERT of every column of `instance`; without its pk when it has none yet (the
    database numbers it)."""
    model = type(instance)
    if instance.pk is None:
        fields = [field for field in column_fields(model) if not field.primary_key]
        return _insert_text_without_pk(model), _prepared(instance, fields)
    return _insert_text(model), _prepared(instance, column_fields(model))


def update(instance: models.Model) -> tuple[str, list[Any]]:
    """The UPDATE of every column of `instance` by its pk (what `save()` sends)."""
    model = type(instance)
    fields = [field for field in column_fields(model) if not field.primary_key]
    return _update_text(model), [*_prepared(instance, fields), instance.pk]


def combined(statements: Sequence[tuple[str, list[Any]]]) -> tuple[str, list[Any]]:
    """Several INSERTs and UPDATEs as one statement, one round trip: all but the last become
    data-modifying WITH queries, which PostgreSQL runs whether or not anything reads them."""
    *first, (last_sql, last_params) = statements
    if not first:
        return last_sql, list(last_params)
    parts = ", ".join(f"w{index} AS ({sql})" for index, (sql, _) in enumerate(first))
    params = [param for _, statement_params in first for param in statement_params]
    return f"WITH {parts} {last_sql}", [*params, *last_params]


def execute_bound(sql: str, params: Sequence[Any]) -> None:
    """Run one write (no rows back) with its values bound by the server, its `%s` placeholders
    numbered once per statement shape. psycopg parses a statement's placeholders on every call
    when it has more than 50 values or 4 KiB of text (it caches only smaller ones), and Django's
    cursors then quote every value into the text: for the ~80 values of the ingest's write,
    13 % of an ingest's app CPU under cProfile, 2 % with a raw cursor, which takes `$n` as they
    are. It runs through Django's cursor wrapper all the same (its errors, execute wrappers,
    query log and counts)."""
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = psycopg.RawCursor(connection.connection)
    wrapper = CursorDebugWrapper if connection.queries_logged else CursorWrapper
    with wrapper(raw, connection) as cursor:
        cursor.execute(_numbered(sql), params)


@functools.lru_cache(maxsize=256)
def _numbered(sql: str) -> str:
    """`%s` placeholders as PostgreSQL's `$1, $2, ...` (the texts here hold no other `%`)."""
    parts = sql.split("%s")
    return "".join(f"{part}${index}" for index, part in enumerate(parts[:-1], start=1)) + parts[-1]


def mark_saved(*instances: models.Model) -> None:
    """The instances are rows now (as after `save()`)."""
    for instance in instances:
        instance._state.adding = False
        instance._state.db = connection.alias
