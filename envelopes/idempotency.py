"""Idempotency-Key: the stored answer for a replay, a refusal for a key reused on another body.

The key is claimed in its own short transaction before the work starts, so a concurrent
duplicate finds it in flight (409) instead of doing the work twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .errors import HoldpointError
from .models import IdempotencyRecord, Team

IN_FLIGHT_TIMEOUT = timedelta(seconds=60)
MAX_KEY_LENGTH = 255


class IdempotencyKeyReused(HoldpointError):
    status, code, title = 422, "idempotency_key_reused", "Idempotency-Key reused with another body"


class IdempotencyInFlight(HoldpointError):
    status, code, title = 409, "idempotency_request_in_flight", "A request with this Idempotency-Key is in flight"


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
    for _ in range(2):
        try:
            with transaction.atomic():
                return IdempotencyRecord.objects.create(team=team, endpoint=endpoint, key=key, body_sha256=body_sha256)
        except IntegrityError:
            existing = IdempotencyRecord.objects.filter(team=team, endpoint=endpoint, key=key).first()
            if existing is None:
                continue  # released between our insert and our read: claim again
        if existing.body_sha256 != body_sha256:
            raise IdempotencyKeyReused("This Idempotency-Key was used with another request body.")
        if existing.status is not None:
            return Replay(status=existing.status, body=existing.response, headers=existing.headers)
        if existing.created_at < timezone.now() - IN_FLIGHT_TIMEOUT:
            # The process that claimed it died mid-request; its work rolled back with it.
            IdempotencyRecord.objects.filter(pk=existing.pk, status__isnull=True).delete()
            continue
        raise IdempotencyInFlight("The first request with this Idempotency-Key has not finished yet.")
    raise IdempotencyInFlight("The first request with this Idempotency-Key has not finished yet.")


def idempotency_store(record: IdempotencyRecord, *, status: int, body: Any, headers: dict[str, str]) -> None:
    IdempotencyRecord.objects.filter(pk=record.pk).update(status=status, response=body, headers=headers)


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
