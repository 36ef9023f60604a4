"""Delivering the outbox: claim -> commit -> send -> record (contract §5).

1. `messages_claim` locks a few due pending messages (SKIP LOCKED, so sweepers running side
   by side never take the same one), counts the try and pushes `next_try_at` one lease ahead,
   and commits. No transaction is open while sending.
2. `message_send` re-checks the URL (DNS re-resolved, every address public), signs the body
   with this try's timestamp and POSTs it to a vetted address, without following redirects,
   within a hard wall-clock deadline (SEND_TIMEOUT for the whole try, however slowly the
   receiver trickles its answer): `outbound.http.signed_post`. A try cut short is a failed try.
3. `try_record` appends the DeliveryTry and moves the message: 2xx -> delivered; 410 ->
   the endpoint is disabled and its pending messages are dead; anything else -> the next try
   after the schedule's delay (with jitter, or later if Retry-After asks), or dead after the
   last one.

A worker that dies between 1 and 3 leaves the message pending with `next_try_at` at the
lease's end: it is simply due again then (at least once, never lost).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from envelopes.tracing import step_traces
from outbound.http import SEND_TIMEOUT, Posted, sending_client, signed_post
from outbound.retry import retry_delay
from telemetry import spans

from .models import DeliveryTry, OutboxMessage
from .services import endpoint_disable

logger = logging.getLogger(__name__)

LEASE = timedelta(minutes=5)  # far above a batch's sends (CLAIM_BATCH x SEND_TIMEOUT)
CLAIM_BATCH = 5
SWEEP_BUDGET_SECONDS = 10.0


@dataclass(frozen=True)
class Claimed:
    """A message claimed for one try (plain values: nothing here touches the DB)."""

    pk: int
    message_id: str
    body: str
    url: str
    secret: str
    number: int  # this try's number
    step_id: int | None = None  # the step the message is about (its trace, linked from the try's span)


# --- 1. claim ----------------------------------------------------------------------------------


def messages_claim(*, now: datetime | None = None, limit: int = CLAIM_BATCH) -> list[Claimed]:
    """Lock up to `limit` due messages, lease them and commit. Messages of a disabled
    endpoint are not sent: they become dead letters."""
    now = now or timezone.now()
    claimed: list[Claimed] = []
    with transaction.atomic():
        due = list(
            OutboxMessage.objects.due(now)
            .select_related("endpoint")
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("next_try_at", "id")[:limit]
        )
        for message in due:
            if not message.endpoint.active:
                message.status = OutboxMessage.Status.DEAD
                message.dead_reason = OutboxMessage.DeadReason.ENDPOINT_DISABLED
                message.save(update_fields=["status", "dead_reason"])
                continue
            message.tries += 1
            message.next_try_at = now + LEASE
            message.save(update_fields=["tries", "next_try_at"])
            claimed.append(
                Claimed(
                    pk=message.pk,
                    message_id=message.message_id,
                    body=message.body,
                    url=message.endpoint.url,
                    secret=message.endpoint.secret,
                    number=message.tries,
                    step_id=message.step_id,
                )
            )
    return claimed


# --- 2. send -----------------------------------------------------------------------------------


def message_send(claimed: Claimed, *, timeout: float = SEND_TIMEOUT, client: httpx.Client | None = None) -> Posted:
    """One try: re-check the target, sign, POST to a vetted address, all within `timeout`
    seconds of wall-clock time (outbound.http.signed_post). Never raises for the receiver's
    faults; they are the result. `client`: the sweep's (sending_client); without one, the try
    builds its own."""
    attributes: spans.Attributes = {
        "holdpoint.webhook.message_id": claimed.message_id,
        "holdpoint.webhook.try": claimed.number,
    }

    def traces() -> list[tuple[str, str]]:  # read only when spans are exported
        return step_traces([claimed.step_id])

    with spans.worker_span("holdpoint.webhook.try", traces=traces, attributes=attributes) as span:
        posted = signed_post(
            url=claimed.url,
            secret=claimed.secret,
            message_id=claimed.message_id,
            body=claimed.body,
            timeout=timeout,
            client=client,
        )
        span.set_attribute("http.response.status_code", posted.status_code or 0)
        span.set_attribute("holdpoint.delivered", posted.delivered)
    return posted


# --- 3. record -------------------------------------------------------------------------------


def try_record(claimed: Claimed, result: Posted, *, now: datetime | None = None) -> str:
    """Append the try and move the message; returns the message's status after it."""
    now = now or timezone.now()
    with transaction.atomic():
        message = OutboxMessage.objects.select_related("endpoint").select_for_update(of=("self",)).get(pk=claimed.pk)
        next_try_at = None
        if message.status == OutboxMessage.Status.PENDING:
            if result.delivered:
                message.status = OutboxMessage.Status.DELIVERED
                message.delivered_at = now
            elif result.status_code == 410:
                endpoint_disable(endpoint=message.endpoint, reason="410 Gone", now=now)
                message.status = OutboxMessage.Status.DEAD
                message.dead_reason = OutboxMessage.DeadReason.ENDPOINT_GONE
            elif message.tries == claimed.number:
                # Still this worker's try (nobody re-claimed it after the lease ran out).
                delay = retry_delay(message.tries, retry_after=result.retry_after)
                if delay is None:
                    message.status = OutboxMessage.Status.DEAD
                    message.dead_reason = OutboxMessage.DeadReason.TRIES_EXHAUSTED
                else:
                    next_try_at = now + delay
                    message.next_try_at = next_try_at
            message.save()
        DeliveryTry.objects.create(
            message=message,
            number=claimed.number,
            tried_at=result.tried_at,
            status_code=result.status_code,
            latency_ms=result.latency_ms,
            error=result.error,
            next_try_at=next_try_at,
        )
    if message.status == OutboxMessage.Status.DEAD:
        logger.warning("webhook %s is a dead letter (%s)", message.message_id, message.dead_reason)
    return message.status


# --- the sweep ---------------------------------------------------------------------------------

# How many delivery sweeps may run at once, across all workers (HOLDPOINT_WEBHOOK_CONCURRENT_SWEEPS,
# default 1, read at each sweep). A worker that consumes both queues (the default command) then
# gives deliveries one process at most, and the others fire timers whatever the receivers do;
# a dedicated `-Q webhooks` worker may raise it to its concurrency. A slot is a cache key; its
# timeout frees the slot of a worker that died mid-sweep.
SWEEP_SLOT_KEY = "holdpoint:webhooks:sweep-slot:{}"
SWEEP_SLOT_SECONDS = 60  # above a sweep's longest run: its budget plus one try's deadline


def sweep_slot_take() -> str | None:
    """A free sweep slot's key, or None when enough sweeps run already ("" when the cache
    cannot say: the sweep runs, as it did before slots)."""
    slots = max(1, int(settings.HOLDPOINT_WEBHOOK_CONCURRENT_SWEEPS))
    try:
        for number in range(slots):
            key = SWEEP_SLOT_KEY.format(number)
            if cache.add(key, 1, timeout=SWEEP_SLOT_SECONDS):
                return key
    except Exception:
        logger.warning("the cache is unavailable; sweeping without a slot", exc_info=True)
        return ""
    return None


def sweep_slot_release(key: str) -> None:
    if key:
        with contextlib.suppress(Exception):
            cache.delete(key)


def messages_release(claimed: list[Claimed], *, now: datetime | None = None) -> int:
    """Hand back claims that were not tried: due again at once, the try not counted."""
    now = now or timezone.now()
    released = 0
    for message in claimed:
        released += OutboxMessage.objects.filter(
            pk=message.pk, status=OutboxMessage.Status.PENDING, tries=message.number
        ).update(tries=F("tries") - 1, next_try_at=now)
    return released


def deliver_due_messages(
    *,
    budget_seconds: float = SWEEP_BUDGET_SECONDS,
    batch: int = CLAIM_BATCH,
    timeout: float = SEND_TIMEOUT,
) -> int:
    """Send due messages, a batch at a time, until none is due or the time budget is spent;
    returns how many tries were made. The budget is checked before each send (claims left
    over are released for the next sweep), so a sweep holds its worker slot for at most the
    budget plus one send, and a send for at most its hard deadline (`timeout`): ~20 s in all,
    however slowly a receiver answers. (Deliveries have their own queue besides, so that a
    worker that consumes only `celery` fires timers whatever the receivers do.)"""
    started = time.monotonic()
    tries = 0
    client: httpx.Client | None = None  # built at the first due message, for all of them
    try:
        while time.monotonic() - started < budget_seconds:
            claimed = messages_claim(limit=batch)
            if not claimed:
                break
            client = client or sending_client(timeout)
            for index, message in enumerate(claimed):
                if time.monotonic() - started >= budget_seconds:
                    messages_release(claimed[index:])
                    return tries
                try:
                    result = message_send(message, timeout=timeout, client=client)
                except Exception as error:  # a bug must not strand the rest of the batch
                    logger.exception("webhook %s: the send failed", message.message_id)
                    result = Posted(tried_at=timezone.now(), error=f"internal error ({type(error).__name__})")
                try_record(message, result)
                tries += 1
        return tries
    finally:
        if client is not None:
            client.close()
