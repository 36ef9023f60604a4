"""Thin Celery tasks over notifications' services and sending."""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import Task, shared_task

from . import retention, sending, services

logger = logging.getLogger(__name__)


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


@shared_task(bind=True, max_retries=2)
def slack_response_send(self: Task, url: str, body: dict[str, Any]) -> int | None:  # type: ignore[type-arg]
    """Update a Slack message through its response_url (notifications.slack), off the request:
    within the hard per-try deadline of every send, retried twice if Slack is unreachable or
    answers 5xx. The URL (valid 30 minutes, 5 uses) is never logged."""
    posted = sending.json_post(url, json.dumps(body).encode(), timeout=sending.SEND_TIMEOUT)
    if posted.status_code is None or posted.status_code >= 500:
        if self.request.retries >= (self.max_retries or 0):
            # Not self.retry(): its MaxRetriesExceededError names the task's args, the URL.
            logger.warning(
                "Slack message update given up after %d tries: %s",
                self.request.retries + 1,
                f"HTTP {posted.status_code}" if posted.status_code else "no answer",
            )
            return None
        raise self.retry(countdown=2 ** (self.request.retries + 1))
    if posted.status_code != 200:
        logger.warning("Slack refused a message update: HTTP %s %s", posted.status_code, posted.body[:100])
    return posted.status_code
