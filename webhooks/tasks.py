"""Thin Celery tasks over webhooks.delivery and webhooks.retention."""

from __future__ import annotations

from celery import shared_task

from . import delivery, retention
from .outbox import delivery_pending_clear


@shared_task
def deliver_due_messages() -> int:
    """Beat's sweep (every HOLDPOINT_SWEEP_SECONDS), also enqueued after an event commits.
    Runs on the `webhooks` queue (CELERY_TASK_ROUTES), as one of at most
    HOLDPOINT_WEBHOOK_CONCURRENT_SWEEPS at once (else it returns at once: the running sweeps
    see the due messages). Sweeps that overlap claim each message under SKIP LOCKED."""
    delivery_pending_clear()  # from here on, an event that commits enqueues a sweep again
    slot = delivery.sweep_slot_take()
    if slot is None:
        return 0
    try:
        return delivery.deliver_due_messages()
    finally:
        delivery.sweep_slot_release(slot)


@shared_task
def purge_webhook_history() -> int:
    """Beat, hourly: forget delivered messages and dead letters past their retention."""
    return retention.delivered_messages_purge() + retention.dead_letters_purge()
