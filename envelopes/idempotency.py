"""Idempotency-Key: the stored answer for a replay, a refusal for a key reused on another body.

The claim, the work and the stored answer are one transaction (issue 29): the claim's row goes
before the work's first write, the answer after its last. They commit together or not at all,
so no crash leaves work done without an answer to replay, nor a claim behind it: a request that
dies takes its claim with it, and the key is free at once. A concurrent duplicate waits on the
claim's uncommitted row for at most IN_FLIGHT_WAIT and replays the first's answer, or is told
409 in flight (with Retry-After) instead of doing the work twice. A keyed call sends what a plain
one sends: the claim is made in the step's context read (`claimed_first`), the answer in the
statement of the work's last write (`modelsql.writes_held`). A claim committed without an
answer (an older version claimed in a transaction of its own) is in flight until
IN_FLIGHT_TIMEOUT, then taken over if no transaction holds it."""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from accounts.models import Team

from . import modelsql
from .errors import HoldpointError
from .models import IdempotencyRecord
from .purging import purge_in_id_order

IN_FLIGHT_TIMEOUT = timedelta(seconds=60)
# A request normally answers within a second: a duplicate is told to come back then. Once the
# first one has run for longer, it is told the time left until its claim may be taken over.
IN_FLIGHT_RETRY_AFTER_S = 1
IN_FLIGHT_SLOW = timedelta(seconds=5)
# How long a duplicate waits for the first request's transaction before it is told 409 (contract
# §4 v1.2: at most a second); PostgreSQL's `lock_timeout` error for it.
IN_FLIGHT_WAIT = timedelta(seconds=1)
LOCK_NOT_AVAILABLE = "55P03"
MAX_KEY_LENGTH = 255


class IdempotencyKeyReused(HoldpointError):
    status, code, title = 422, "idempotency_key_reused", "Idempotency-Key reused with another body"


class IdempotencyInFlight(HoldpointError):
    status, code, title = 409, "idempotency_request_in_flight", "A request with this Idempotency-Key is in flight"

    def __init__(self, *, retry_after_s: int) -> None:
        super().__init__(
            f"The first request with this Idempotency-Key has not finished yet; retry in {retry_after_s} s."
        )
        self.retry_after_s = retry_after_s
        self.headers = {"Retry-After": str(retry_after_s)}


def in_flight_retry_after(claimed_at: datetime, now: datetime) -> int:
    """Seconds a duplicate should wait (contract §4: `Retry-After` on the in-flight 409)."""
    if now - claimed_at < IN_FLIGHT_SLOW:
        return IN_FLIGHT_RETRY_AFTER_S
    return max(IN_FLIGHT_RETRY_AFTER_S, math.ceil((claimed_at + IN_FLIGHT_TIMEOUT - now).total_seconds()))


class IdempotencyKeyInvalid(HoldpointError):
    status, code, title = 422, "schema_invalid", "Invalid Idempotency-Key"


@dataclass(frozen=True)
class Replay:
    status: int
    body: Any
    headers: dict[str, str]


def body_fingerprint(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\x00")
    return digest.hexdigest()


def idempotency_claim(*, team: Team, endpoint: str, key: str, body_sha256: str) -> IdempotencyRecord | Replay:
    """Claim the key for this request, or return the stored answer to replay. Called in the
    transaction that does the work and stores its answer (`_idempotent`): the claim is then
    visible to nobody until that transaction commits, with its answer, or rolls back, with it."""
    key_check(key)
    claimed_at = timezone.now()
    for _ in range(2):
        claim = IdempotencyRecord(team=team, endpoint=endpoint, key=key, body_sha256=body_sha256)
        if _claim(claim):
            return claim
        existing = IdempotencyRecord.objects.filter(team=team, endpoint=endpoint, key=key).first()
        if existing is None:
            continue  # released between our insert and our read: claim again
        if existing.body_sha256 != body_sha256:
            raise IdempotencyKeyReused("This Idempotency-Key was used with another request body.")
        if existing.status is not None:
            return Replay(status=existing.status, body=existing.response, headers=existing.headers)
        # A claim committed without its answer: claimed in a transaction of its own (a version
        # before issue 29, still running beside this one in a rolling upgrade, or a test).
        claimed_at = existing.created_at
        if claimed_at < timezone.now() - IN_FLIGHT_TIMEOUT:
            _take_over_abandoned(existing)
            continue
        break
    raise IdempotencyInFlight(retry_after_s=in_flight_retry_after(claimed_at, timezone.now()))


def key_check(key: str) -> None:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise IdempotencyKeyInvalid(
            "Idempotency-Key must be 1..255 printable characters.",
            errors=[{"field": "Idempotency-Key", "rule": "maxLength"}],
        )


def _claim(claim: IdempotencyRecord) -> bool:
    """Insert the claim; False if the key is claimed already.

    A duplicate's INSERT waits for the transaction that holds the key's uncommitted row: False
    once that one commits (its answer is then there to read), True if it rolls back. On
    PostgreSQL the wait is at most IN_FLIGHT_WAIT (`lock_timeout` for this statement alone, set
    before the insert and put back as it returns), then 409 in flight; SQLite's writers take
    turns (BEGIN IMMEDIATE), so there a duplicate waits for the first's commit at its BEGIN."""
    if connection.vendor != "postgresql":
        try:
            with transaction.atomic():
                claim.save(force_insert=True)
        except IntegrityError:
            return False
        return True
    try:
        row = modelsql.fetchone_bound(f"{claim_ctes()} SELECT claimed FROM claimed", claim_params(claim))  # noqa: S608
    except OperationalError as error:
        _in_flight_raise(error)
        raise
    assert row is not None
    return _claim_made(claim, row[0])


def _claim_made(claim: IdempotencyRecord, claimed: int | None) -> bool:
    """The claim's row, numbered `claimed` (None: the key was claimed already)."""
    if claimed is None:
        return False
    claim.pk = claimed
    modelsql.mark_saved(claim)
    return True


def _in_flight_raise(error: OperationalError) -> None:
    """A claim that waited IN_FLIGHT_WAIT for another transaction's claim of the key: 409."""
    if getattr(error.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE:
        raise IdempotencyInFlight(retry_after_s=IN_FLIGHT_RETRY_AFTER_S) from error


def _in_flight_wait_ms() -> str:
    return str(int(IN_FLIGHT_WAIT.total_seconds() * 1000))


@functools.cache
def claim_ctes() -> str:
    """The claim as WITH queries ending in `claimed` (one row: the claim's id, NULL when the key
    is claimed already), for a statement of its own or to go before another's: `lock_timeout` is
    set before the claim's row is inserted, which is where a duplicate waits, and put back in
    `claimed`, so what reads `claimed` (a lateral FOR UPDATE) waits as long as it would have. The
    INSERT has no pk (the database numbers it), its values cast to their columns' types (an
    INSERT ... SELECT does not infer them as VALUES does). Named placeholders: `claim_params`."""
    q = modelsql.quote
    fields = [field for field in modelsql.column_fields(IdempotencyRecord) if not field.primary_key]
    columns = ", ".join(q(field.column) for field in fields)
    values = ", ".join(
        f"CAST(%(claim_{index})s AS {field.cast_db_type(connection)})" for index, field in enumerate(fields)
    )
    return (
        "WITH was AS (SELECT current_setting('lock_timeout') AS v), "  # noqa: S608 (names, types)
        "wait AS (SELECT set_config('lock_timeout', %(claim_wait_ms)s, true) FROM was), "
        f"claim AS (INSERT INTO {modelsql.table(IdempotencyRecord)} ({columns}) SELECT {values} FROM wait "
        f"ON CONFLICT DO NOTHING RETURNING {q('id')}), "
        "claimed AS MATERIALIZED (SELECT (SELECT id FROM claim) AS claimed, "
        "set_config('lock_timeout', was.v, true) AS lock_timeout FROM was)"
    )


def claim_params(claim: IdempotencyRecord) -> dict[str, Any]:
    values = modelsql.insert(claim)[1]
    return {"claim_wait_ms": _in_flight_wait_ms(), **{f"claim_{index}": value for index, value in enumerate(values)}}


# --- a claim made with the work's first statement -------------------------------------------------


class ClaimTaken(Exception):
    """The key was claimed before the claim made with the work's first statement: the work
    stops, its transaction rolls back, and the caller claims on its own (then replays, refuses
    or answers 409). `in_flight`: the claim waited IN_FLIGHT_WAIT for another request's."""

    def __init__(self, *, in_flight: bool = False) -> None:
        super().__init__("in flight" if in_flight else "claimed")
        self.in_flight = in_flight


class PendingClaim:
    """The request's claim, not made yet: `claim_to_make` hands it to the statement that makes it."""

    __slots__ = ("made", "record")

    def __init__(self, record: IdempotencyRecord) -> None:
        self.record, self.made = record, False


_PENDING: ContextVar[PendingClaim | None] = ContextVar("idempotency_pending", default=None)


@contextmanager
def claimed_first(*, team: Team, endpoint: str, key: str, body_sha256: str) -> Iterator[IdempotencyRecord]:
    """Within it, the key is claimed before the connection's first statement, or in it: the step
    context read (`step_context`) makes the claim in its own statement (`claim_to_make`), so a
    keyed call costs the statements of a plain one. Yields the claim; `claim_now` makes it if no
    statement has. A claim already taken raises ClaimTaken from that statement."""
    key_check(key)
    pending = PendingClaim(IdempotencyRecord(team=team, endpoint=endpoint, key=key, body_sha256=body_sha256))
    token = _PENDING.set(pending)
    try:
        with connection.execute_wrapper(_claim_before):
            yield pending.record
    finally:
        _PENDING.reset(token)


def _claim_before(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
    claim_now()
    return execute(sql, params, many, context)


def claim_to_make() -> IdempotencyRecord | None:
    """The pending claim (see `claimed_first`), now the caller's to make in its statement, then
    to report with `claim_reported` or `claim_failed`; None when there is none to make."""
    pending = _PENDING.get()
    if pending is None or pending.made:
        return None
    pending.made = True
    return pending.record


def claim_now() -> None:
    """Make the pending claim, if any, as a statement of its own."""
    record = claim_to_make()
    if record is None:
        return
    try:
        claimed = _claim(record)
    except IdempotencyInFlight as error:
        raise ClaimTaken(in_flight=True) from error
    if not claimed:
        raise ClaimTaken()


def claim_reported(record: IdempotencyRecord, claimed: int | None) -> None:
    """The claim a statement made (`claim_to_make`), numbered `claimed`, or ClaimTaken."""
    if not _claim_made(record, claimed):
        raise ClaimTaken()


def claim_failed(error: OperationalError) -> None:
    """A statement that made the claim failed: ClaimTaken when it waited IN_FLIGHT_WAIT."""
    try:
        _in_flight_raise(error)
    except IdempotencyInFlight as in_flight:
        raise ClaimTaken(in_flight=True) from in_flight


def _take_over_abandoned(record: IdempotencyRecord) -> None:
    """Forget a claim committed without an answer whose request died: its work rolled back with
    it. A claim that a live request of an older version still holds (FOR UPDATE) is skipped."""
    with transaction.atomic():
        abandoned = list(
            IdempotencyRecord.objects.select_for_update(skip_locked=True)
            .filter(pk=record.pk, status__isnull=True)
            .values_list("pk", flat=True)
        )
        IdempotencyRecord.objects.filter(pk__in=abandoned, status__isnull=True).delete()


def idempotency_store(record: IdempotencyRecord, *, status: int, body: Any, headers: dict[str, str]) -> None:
    """Store the answer to replay: in the transaction of the work it answers (see the module).
    The three columns as `save(update_fields=...)` would write them, in one prepared statement
    with the work's last write when it is held for it (`modelsql.writes_held`)."""
    record.status, record.response, record.headers = status, body, headers
    modelsql.write_with(modelsql.update(record, ("status", "response", "headers")))


def idempotency_purge(*, now: datetime | None = None, batch: int = 5000) -> int:
    """Forget the answers older than HOLDPOINT_IDEMPOTENCY_TTL_HOURS, a batch per statement so
    that no transaction holds many rows, in id order (`purging`: no index on created_at, which
    every keyed call would pay for); returns how many. A key used again after that is a new
    request (the attempt gate, not this table, is what keeps a write from happening twice)."""
    cutoff = (now or timezone.now()) - timedelta(hours=settings.HOLDPOINT_IDEMPOTENCY_TTL_HOURS)
    return purge_in_id_order(IdempotencyRecord.objects.all(), written="created_at", cutoff=cutoff, batch=batch)
