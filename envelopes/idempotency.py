"""Idempotency-Key: the stored answer for a replay, a refusal for a key reused on another body.

The key is claimed in its own short transaction before the work starts, so a concurrent
duplicate finds it in flight (409, with Retry-After) instead of doing the work twice. The work
then runs in one transaction that first locks the claim (`idempotency_hold`) and ends by storing
the answer (`idempotency_store`): the work and its answer commit together or not at all, so a
crash between them can never leave work done without an answer to replay. A claim left without
an answer is taken over after IN_FLIGHT_TIMEOUT, and only when no transaction holds it: its
request died, and its work rolled back with it.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.models import Team

from . import modelsql
from .errors import HoldpointError
from .models import IdempotencyRecord

IN_FLIGHT_TIMEOUT = timedelta(seconds=60)
# A request normally answers within a second: a duplicate is told to come back then. Once the
# first one has run for longer, it is told the time left until its claim may be taken over.
IN_FLIGHT_RETRY_AFTER_S = 1
IN_FLIGHT_SLOW = timedelta(seconds=5)
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
    """Claim the key for this request, or return the stored answer to replay."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise IdempotencyKeyInvalid(
            "Idempotency-Key must be 1..255 printable characters.",
            errors=[{"field": "Idempotency-Key", "rule": "maxLength"}],
        )
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
        claimed_at = existing.created_at
        if claimed_at < timezone.now() - IN_FLIGHT_TIMEOUT:
            _take_over_abandoned(existing)
            continue
        break
    raise IdempotencyInFlight(retry_after_s=in_flight_retry_after(claimed_at, timezone.now()))


def _claim(claim: IdempotencyRecord) -> bool:
    """Insert the claim in a transaction of its own; False if the key is claimed already.

    On PostgreSQL (outside any transaction, as `_idempotent` calls it): one prepared statement,
    its own transaction, committed without waiting for the disk (`synchronous_commit` off for
    that transaction alone, set as the row is returned). What the claim protects needs no more:
    a crash can lose only a claim whose work had not committed (the work's own commit waits for
    the disk, and so for every earlier commit), and a lost claim is a key never seen: waiting
    for the disk here would cost every keyed request a second flush on top of its work's."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        try:
            with transaction.atomic():
                claim.save(force_insert=True)
        except IntegrityError:
            return False
        return True
    sql, values = modelsql.insert(claim)
    row = modelsql.fetchone_bound(
        f"{sql} ON CONFLICT DO NOTHING RETURNING {modelsql.quote('id')}, set_config('synchronous_commit', 'off', true)",
        values,
    )
    if row is None:
        return False
    claim.pk = row[0]
    modelsql.mark_saved(claim)
    return True


def _take_over_abandoned(record: IdempotencyRecord) -> None:
    """Forget a claim whose request died without an answer: its work rolled back with it. A
    claim that a live request still holds (`idempotency_hold`, a slow request) is skipped; on
    SQLite, where writers take turns, the delete waits for that request and then finds its answer."""
    with transaction.atomic():
        abandoned = list(
            IdempotencyRecord.objects.select_for_update(skip_locked=True)
            .filter(pk=record.pk, status__isnull=True)
            .values_list("pk", flat=True)
        )
        IdempotencyRecord.objects.filter(pk__in=abandoned, status__isnull=True).delete()


def idempotency_hold(record: IdempotencyRecord) -> bool:
    """Lock the claim for the caller's transaction, the one that does the work and stores its
    answer, so that nobody takes it over while the work runs. False: it was taken over (the
    request took longer than IN_FLIGHT_TIMEOUT before it began its work)."""
    assert transaction.get_connection().in_atomic_block, "hold the claim in the work's transaction"
    if connection.vendor != "postgresql":  # no FOR UPDATE there: writers take turns anyway
        return IdempotencyRecord.objects.filter(pk=record.pk, status__isnull=True).exists()
    return modelsql.fetchone_bound(_hold_sql(), [record.pk]) is not None


@functools.cache
def _hold_sql() -> str:
    """`select_for_update().filter(pk=..., status__isnull=True).exists()`, written once: a
    prepared statement on PostgreSQL (envelopes.modelsql), no ORM compilation per request."""
    q = modelsql.quote
    return (
        f"SELECT 1 FROM {modelsql.table(IdempotencyRecord)} WHERE {q('id')} = %s AND {q('status')} IS NULL FOR UPDATE"  # noqa: S608
    )


def idempotency_store(record: IdempotencyRecord, *, status: int, body: Any, headers: dict[str, str]) -> None:
    """Store the answer to replay: in the transaction of the work it answers (see the module).
    The three columns as `save(update_fields=...)` would write them, in one prepared statement
    (envelopes.modelsql)."""
    record.status, record.response, record.headers = status, body, headers
    modelsql.execute_bound(*modelsql.update(record, ("status", "response", "headers")))


def idempotency_release(record: IdempotencyRecord) -> None:
    IdempotencyRecord.objects.filter(pk=record.pk, status__isnull=True).delete()


def idempotency_purge(*, now: datetime | None = None, batch: int = 5000) -> int:
    """Forget the answers older than HOLDPOINT_IDEMPOTENCY_TTL_HOURS, a batch per statement so
    that no transaction holds many rows; returns how many. A key used again after that is a new
    request (the attempt gate, not this table, is what keeps a write from happening twice)."""
    cutoff = (now or timezone.now()) - timedelta(hours=settings.HOLDPOINT_IDEMPOTENCY_TTL_HOURS)
    purged = 0
    while True:
        ids = list(
            IdempotencyRecord.objects.filter(created_at__lt=cutoff)
            .order_by("created_at")
            .values_list("pk", flat=True)[:batch]
        )
        if ids:
            purged += IdempotencyRecord.objects.filter(pk__in=ids).delete()[0]
        if len(ids) < batch:
            return purged
