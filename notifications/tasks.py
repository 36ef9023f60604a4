"""Thin Celery tasks over notifications' services and sending."""

from __future__ import annotations

from celery import shared_task

from . import retention, sending, services


@shared_task
def notify() -> int:
    """Beat's sweep (every HOLDPOINT_SWEEP_SECONDS), also enqueued when a notice commits:
    write what held steps owe (reminders, warnings, escalations), flush the channels whose
    batching window allows a message, and send what is due. Overlapping runs are safe: watches,
    channels and messages are each claimed under SKIP LOCKED."""
    services.watches_sweep()
    services.channels_flush()
    return sending.deliver_due_messages()


@shared_task
def purge_notification_history() -> int:
    """Beat, hourly: forget finished messages, dropped notices and spent watches past their
    retention (notifications.retention)."""
    return retention.history_purge()
