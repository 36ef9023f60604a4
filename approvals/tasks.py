"""Thin Celery tasks for reviewer decisions too large for one request."""

from __future__ import annotations

from celery import shared_task

from .services import cancel_all_requests_drain


@shared_task
def cancel_held_steps() -> int:
    """Drain the pending cancel-alls of halted tools with many held steps (approvals.services):
    rung when one commits, and run by beat, so a ring lost with the broker loses nothing. Each
    step is re-checked under its lock and the tool's, so a redelivered task cancels nothing
    twice and a run stops when the tool was resumed."""
    return cancel_all_requests_drain()
