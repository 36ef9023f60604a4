"""SQL written from the models' own fields: the text once per process, the values as `save()` sends them.

Compiling a query through the ORM costs more CPU than PostgreSQL spends answering it, so the
core's writer (`transitions.plan_write`), the key lookup and the Idempotency-Key's rows use
statements whose text is built once from `Model._meta` and whose values go through each
field's `get_db_prep_save`, exactly what the ORM sends for `save()` (tested over the core's
models: tests/perf/test_modelsql_writes.py). A new column on a model is picked up with its default.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

M = TypeVar("M", bound=models.Model)


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
def sequence(model: type[models.Model]) -> str:
    """The SQL literal of the sequence that numbers `model`'s primary key (`'"public".
    "envelopes_step_id_seq"'::regclass`), looked up once per process: `nextval` of it costs
    PostgreSQL a lookup by name, where `pg_get_serial_sequence` at every call searched the
    catalog's dependencies."""
    assert model._meta.pk is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [model._meta.db_table, model._meta.pk.column])
        (name,) = cursor.fetchone()
    return "'" + name.replace("'", "''") + "'::regclass"


@functools.cache
def _converters(model: type[models.Model]) -> tuple[tuple[int, Any, Any], ...]:
    """The fields' own converters (a JSONField's decoding...), as the ORM's compiler applies them."""
    return tuple(
        (index, converter, field)
        for index, field in enumerate(column_fields(model))
        for converter in field.get_db_converters(connection)
    )


def _db() -> Any:
    """The default connection itself. `django.db.connection` is a proxy that looks the connection
    up (an asgiref Local) on every attribute read: the ~80 field values of an ingest's write read
    it several times each."""
    return connections[DEFAULT_DB_ALIAS]


def from_row(model: type[models.Model], row: Sequence[Any]) -> Any:
    """A model instance from the columns `select_list` names, as the ORM would build it."""
    db = _db()
    fields = column_fields(model)
    values = list(row[: len(fields)])
    for index, converter, field in _converters(model):
        values[index] = converter(values[index], field.get_col(field.model._meta.db_table), db)
    return model.from_db(db.alias, [field.attname for field in fields], values)


@functools.cache
def _constructor(model: type[models.Model]) -> tuple[tuple[str, str, models.Field[Any, Any] | None, Any], ...]:
    """Per concrete field, in order: its attname, its name, the field when it is a foreign key
    (given as an object by its name), and its default (a callable is called per instance)."""
    plan = []
    for field in column_fields(model):
        relation = field if isinstance(field, models.ForeignKey) else None
        default = field._get_default  # type: ignore[attr-defined]  # what get_default() calls
        plan.append((field.attname, field.name, relation, default))
    return tuple(plan)


def new(model: type[M], **values: Any) -> M:
    """`model(**values)`, built as Django builds a row it read (the values by position), which
    skips the keyword path's per-field lookups: a foreign key by its attname (`team_id=`) or by
    its name with the object (`team=`, set through its descriptor as Django sets it). Every other
    field takes its default. Only column values: anything else is a TypeError."""
    args = []
    related = []
    for attname, name, relation, default in _constructor(model):
        if attname in values:
            args.append(values.pop(attname))
        elif relation is not None and name in values:
            args.append(None)
            related.append((relation, values.pop(name)))
        else:
            args.append(default())
    if values:
        raise TypeError(f"{model.__name__} has no column {', '.join(values)}")
    instance = model(*args)
    for relation, target in related:
        setattr(instance, relation.name, target)  # its descriptor, as the keyword path sets it
    return instance


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
def _update_text(model: type[models.Model], names: tuple[str, ...] | None = None) -> str:
    fields = _update_fields(model, names)
    assignments = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    assert model._meta.pk is not None
    pk = quote(model._meta.pk.column)
    return f"UPDATE {table(model)} SET {assignments} WHERE {pk} = %s"  # noqa: S608 (names only)


def _prepared(instance: models.Model, fields: Sequence[models.Field[Any, Any]]) -> list[Any]:
    """Each field's value as `save()` would send it: `get_db_prep_save`, except for the plain
    values (`_as_is`) that it hands to the driver unchanged, which skip its three calls per
    value, for the many values of one combined write."""
    db = _db()
    plain = db.vendor == "postgresql"  # elsewhere a datetime, say, is sent as text
    values = []
    for field in fields:
        value = getattr(instance, field.attname)
        if plain and _passes_as_is(value, _as_is(field)):
            values.append(value)
        else:
            values.append(field.get_db_prep_save(value, connection=db))
    return values


def _passes_as_is(value: Any, kinds: tuple[type, ...]) -> bool:
    if not kinds:
        return False
    if value is None:
        return True
    return type(value) in kinds and (type(value) is not datetime or value.tzinfo is not None)


_PLAIN_FIELDS: dict[type[models.Field[Any, Any]], tuple[type, ...]] = {
    models.CharField: (str,),
    models.TextField: (str,),
    models.BooleanField: (bool,),
    models.DateTimeField: (datetime,),  # aware only: Django makes a naive one aware, with a warning
    **dict.fromkeys(
        (
            models.AutoField,
            models.BigAutoField,
            models.IntegerField,
            models.BigIntegerField,
            models.SmallIntegerField,
            models.PositiveIntegerField,
            models.PositiveSmallIntegerField,
            models.PositiveBigIntegerField,
        ),
        (int,),
    ),
}


@functools.cache
def _as_is(field: models.Field[Any, Any]) -> tuple[type, ...]:
    """The value types (exactly these, and None) that `field.get_db_prep_save` returns unchanged
    on PostgreSQL, for the field classes whose preparation is known to be the identity on them
    (not their subclasses, which may prepare otherwise); () for any other field. A foreign key
    prepares as its target."""
    if isinstance(field, models.ForeignKey):
        return _as_is(field.target_field)
    return _PLAIN_FIELDS.get(type(field), ())


def insert(instance: models.Model) -> tuple[str, list[Any]]:
    """The INSERT of every column of `instance`; without its pk when it has none yet (the
    database numbers it)."""
    model = type(instance)
    if instance.pk is None:
        fields = [field for field in column_fields(model) if not field.primary_key]
        return _insert_text_without_pk(model), _prepared(instance, fields)
    return _insert_text(model), _prepared(instance, column_fields(model))


def update(instance: models.Model, fields: tuple[str, ...] | None = None) -> tuple[str, list[Any]]:
    """The UPDATE of every column of `instance` by its pk (what `save()` sends), or of the named
    fields only (what `save(update_fields=...)` sends)."""
    model = type(instance)
    return _update_text(model, fields), [*_prepared(instance, _update_fields(model, fields)), instance.pk]


@functools.cache
def _update_fields(model: type[models.Model], names: tuple[str, ...] | None) -> tuple[models.Field[Any, Any], ...]:
    if names is None:
        return tuple(field for field in column_fields(model) if not field.primary_key)
    by_name = {field.name: field for field in column_fields(model)}
    return tuple(by_name[name] for name in names)


def combined(
    statements: Sequence[tuple[str, list[Any]]], counted: Sequence[tuple[str, list[Any]]] = ()
) -> tuple[str, list[Any]]:
    """Several INSERTs and UPDATEs as one statement, one round trip: all but the last become
    data-modifying WITH queries, which PostgreSQL runs whether or not anything reads them.
    `counted`: more of them, each ending in RETURNING, whose row counts the statement answers
    (one row, a count each, in their order; run it with `fetchone_bound`)."""
    if counted:
        offset = len(statements)
        counts = ", ".join(f"(SELECT count(*) FROM w{offset + index})" for index in range(len(counted)))  # noqa: S608
        statements = [*statements, *counted, (f"SELECT {counts}", [])]
    *first, (last_sql, last_params) = statements
    if not first:
        return last_sql, list(last_params)
    parts = ", ".join(f"w{index} AS ({sql})" for index, (sql, _) in enumerate(first))
    params = [param for _, statement_params in first for param in statement_params]
    return f"WITH {parts} {last_sql}", [*params, *last_params]


def positional(sql: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """A statement with `%(name)s` placeholders as one with `%s` and its values in their order (a
    name used twice is given twice), to be `combined` with others."""
    names: list[str] = []

    def unnamed(match: re.Match[str]) -> str:
        assert match.group(1), "a %s among named placeholders"
        names.append(match.group(1))
        return "%s"

    return _PLACEHOLDER.sub(unnamed, sql), [params[name] for name in names]


def execute_bound(sql: str, params: Sequence[Any] | Mapping[str, Any]) -> int:
    """Run one write with its values bound by the server; its row count."""
    with _bound_cursor(sql, params) as (cursor, text, values):
        cursor.execute(text, values)
        return int(cursor.rowcount)


def fetchone_bound(sql: str, params: Sequence[Any] | Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Run one read with its values bound by the server; its first row."""
    with _bound_cursor(sql, params) as (cursor, text, values):
        cursor.execute(text, values)
        row = cursor.fetchone()
        return None if row is None else tuple(row)


@contextmanager
def _bound_cursor(
    sql: str, params: Sequence[Any] | Mapping[str, Any]
) -> Iterator[tuple[Any, str, Sequence[Any] | Mapping[str, Any]]]:
    """A cursor for one hot statement, with the text and values to give it.

    On PostgreSQL: a raw psycopg cursor, the `%s` / `%(name)s` placeholders numbered `$1, $2...`
    once per statement text, the values bound by the server. Two reasons: Django's cursors
    quote every value into the text on the client (psycopg re-parses a statement with more than
    50 values on every call); and only server-bound statements can be prepared.
    With `prepare_threshold` set on the connection (config/settings.py), psycopg prepares a
    statement the third time a connection runs it, and PostgreSQL then skips parsing and
    planning it (for the context read, planning costs more than its execution). Django's ORM cursors bind on the
    client and are never prepared, so nothing else changes.

    It runs through Django's cursor wrapper all the same (its errors, execute wrappers, query
    log and counts). On any other database: Django's own cursor, the text and values as given.
    """
    db = _db()
    if db.vendor != "postgresql":
        with db.cursor() as cursor:
            yield cursor, sql, params
        return
    text, names = _numbered(sql)
    if isinstance(params, Mapping):
        values: Sequence[Any] = [params[name] for name in names]
    else:
        assert not any(names), "positional values for named placeholders"
        values = params
    # As Django's own cursors begin: the per-request health check (CONN_HEALTH_CHECKS), so a
    # connection the server closed since the last request is replaced, not used and failed.
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    wrapper = _BoundDebugWrapper if db.queries_logged else CursorWrapper
    # Not closed on the way out: the connection's one raw cursor serves every hot statement
    # (building a psycopg cursor copies the connection's adapters).
    yield wrapper(_raw_cursor(db), db), text, values


def _raw_cursor(db: Any) -> psycopg.RawCursor[Any]:
    """The raw cursor of the connection `db` has now, made on first use (a new connection, after
    a reconnect, gets a new one)."""
    cursor: psycopg.RawCursor[Any] | None = getattr(db, "_hot_raw_cursor", None)
    if cursor is None or cursor.connection is not db.connection or cursor.closed:
        cursor = psycopg.RawCursor(db.connection)
        db._hot_raw_cursor = cursor
    return cursor


class _BoundDebugWrapper(CursorDebugWrapper):
    """Logs the statement as sent, `$n` and all: a prepared statement's execution leaves no text
    for Django's `last_executed_query` to read back (it logged None)."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


_PLACEHOLDER = re.compile(r"%(?:\((\w+)\))?s")


@functools.lru_cache(maxsize=256)
def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """`%s` and `%(name)s` placeholders as PostgreSQL's `$1, $2, ...` (a name used twice is one
    number), and the names in the order of their numbers ('' for `%s`). The texts here hold no
    other `%`."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None or name not in names:
            names.append(name or "")
            return f"${len(names)}"
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, sql), tuple(names)


def mark_saved(*instances: models.Model) -> None:
    """The instances are rows now (as after `save()`)."""
    for instance in instances:
        instance._state.adding = False
        instance._state.db = DEFAULT_DB_ALIAS


def next_id(model: type[models.Model]) -> int:
    """A primary key for a row of `model` not written yet, from the table's own sequence (what
    its INSERT would have taken), so that what names the row (an audit link's hash) is computed
    before it is written: `nextval` on PostgreSQL, SQLite's `sqlite_sequence` (which numbers
    Django's AUTOINCREMENT keys) elsewhere."""
    db = _db()
    if db.vendor == "postgresql":
        row = fetchone_bound(f"SELECT nextval({sequence(model)})", [])
        assert row is not None
        return int(row[0])
    assert model._meta.pk is not None
    name, pk = model._meta.db_table, quote(model._meta.pk.column)
    with db.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT %s, 0 "
            "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = %s)",
            [name, name],
        )
        cursor.execute(
            f"UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT max({pk}) FROM {table(model)}), 0)) + 1 "  # noqa: S608
            "WHERE name = %s RETURNING seq",
            [name],
        )
        return int(cursor.fetchone()[0])


# --- a write held for the next statement ----------------------------------------------------------


class _Held:
    """A write not sent yet: its statements, the counted ones, and what to do with the counts."""

    __slots__ = ("counted", "statements", "written")

    def __init__(
        self,
        statements: Sequence[tuple[str, list[Any]]],
        counted: Sequence[tuple[str, list[Any]]],
        written: Callable[[Sequence[int]], object],
    ) -> None:
        self.statements, self.counted, self.written = statements, counted, written


_HELD: ContextVar[list[_Held] | None] = ContextVar("modelsql_held", default=None)


@contextmanager
def writes_held() -> Iterator[None]:
    """Within it, on PostgreSQL, `write` holds its write until the connection's next statement,
    which it then goes before, or until `write_with`, which sends it in the same statement as
    the caller's own: one round trip for a transaction's last write and what its caller stores
    with it (an Idempotency-Key's answer). A write held at the end is sent then; one held when
    the block raises is dropped with the transaction the caller then rolls back."""
    if _db().vendor != "postgresql":
        yield
        return
    held: list[_Held] = []
    token = _HELD.set(held)
    try:
        with _db().execute_wrapper(_held_first):
            yield
            _flush(held)
    finally:
        _HELD.reset(token)


def _held_first(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
    """An execute wrapper: any statement of the connection goes after the write held before it."""
    held = _HELD.get()
    if held:
        _flush(held)
    return execute(sql, params, many, context)


def _flush(held: list[_Held], extra: Sequence[tuple[str, list[Any]]] = ()) -> None:
    if held:
        pending = held.pop()
        write_now(pending.statements, pending.counted, pending.written, extra=extra)
    elif extra:
        execute_bound(*combined(extra))


def write(
    statements: Sequence[tuple[str, list[Any]]],
    counted: Sequence[tuple[str, list[Any]]],
    written: Callable[[Sequence[int]], object],
) -> None:
    """Send INSERTs and UPDATEs as one statement (`combined`), then `written(counts)`: now, or,
    within `writes_held`, before the connection's next statement."""
    held = _HELD.get()
    if held is None:
        write_now(statements, counted, written)
        return
    _flush(held)  # two writes of one row cannot share a statement: the first one goes first
    held.append(_Held(statements, counted, written))


def write_now(
    statements: Sequence[tuple[str, list[Any]]],
    counted: Sequence[tuple[str, list[Any]]],
    written: Callable[[Sequence[int]], object],
    *,
    extra: Sequence[tuple[str, list[Any]]] = (),
) -> None:
    sql, params = combined([*statements, *extra], counted)
    if counted:
        counts: Sequence[int] = fetchone_bound(sql, params) or ()
    else:
        counts = ()
        execute_bound(sql, params)
    written(counts)


def write_with(statement: tuple[str, list[Any]]) -> None:
    """Send `statement` with the write held for it (see `writes_held`), or alone."""
    held = _HELD.get()
    _flush(held or [], extra=[statement])
