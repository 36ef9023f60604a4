"""Thin Celery tasks for reviewer decisions too large for one request."""

from __future__ import annotations

from celery import shared_task
from django.contrib.auth import get_user_model

from accounts.models import Team
from envelopes.models import Tool

from .services import tool_cancel_steps_while_halted


@shared_task
def cancel_held_steps(*, team_id: int, tool_id: int, actor_id: int, reason: str, step_ids: list[int]) -> int:
    """A reviewer's cancel-all of a halted tool with many held steps (approvals.services). Each
    step is re-checked under its lock and the tool's, so a redelivered task cancels nothing twice
    and stops when the tool was resumed."""
    team = Team.objects.get(pk=team_id)
    tool = Tool.objects.get(pk=tool_id, team=team)
    actor = get_user_model().objects.get(pk=actor_id)
    result = tool_cancel_steps_while_halted(team=team, tool=tool, actor=actor, reason=reason, step_ids=step_ids)
    return result.cancelled
