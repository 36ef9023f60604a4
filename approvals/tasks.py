"""Thin Celery tasks for reviewer decisions too large for one request."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from .models import CancelAllRequest
from .services import cancel_all_requests_drain


@shared_task
def cancel_held_steps(**queued_before: Any) -> int:
    """Drain the pending cancel-alls of halted tools with many held steps (approvals.services):
    rung when one commits, and run by beat, so a ring lost with the broker loses nothing. Each
    step is re-checked under its lock and the tool's, so a redelivered task cancels nothing
    twice and a run stops when the tool was resumed. `queued_before`: a message published by
    the release that queued the request itself (team_id, tool_id, actor_id, reason, step_ids),
    stored as a request here so that a deploy does not lose it."""
    if queued_before:
        fields = {name: queued_before[name] for name in ("team_id", "tool_id", "actor_id", "reason", "step_ids")}
        CancelAllRequest.objects.create(**fields)
    return cancel_all_requests_drain()
