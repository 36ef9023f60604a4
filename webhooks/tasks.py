"""Thin Celery tasks over webhooks.delivery."""

from __future__ import annotations

from celery import shared_task

from . import delivery


@shared_task
def deliver_due_messages() -> int:
    """Beat's sweep (every HOLDPOINT_SWEEP_SECONDS), also enqueued after an event commits.
    Sweeps may overlap: each message is claimed under SKIP LOCKED and leased."""
    return delivery.deliver_due_messages()
