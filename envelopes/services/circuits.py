"""The circuit of a tool: halted by a service-wide failure, resumed by a reviewer or by the
sweep once its cooldown has passed."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from ..audit import audit_append
from ..events import event_emit
from ..models import AuditEvent, Envelope, Tool
from ..rfc3339 import rfc3339
from ..transitions import AGENT, SYSTEM


def tool_halt(tool: Tool, *, envelope: Envelope, now: datetime) -> None:
    locked = Tool.objects.select_for_update().get(pk=tool.pk)
    until = envelope.not_before or (now + timedelta(seconds=locked.halt_cooldown_s))
    if until <= now:
        until = now + timedelta(seconds=locked.halt_cooldown_s)
    was_halted = locked.is_halted(now)
    if was_halted and locked.halted_until and locked.halted_until >= until:
        return
    locked.halted_until = until
    locked.halted_reason = envelope.code
    if not was_halted:
        locked.halted_at = now
    audit_append(
        holder=locked,
        kind=AuditEvent.Kind.CIRCUIT,
        actor=AGENT,
        reason="halted",
        data={"code": envelope.code, "until": rfc3339(until), "envelope_id": envelope.pk},
        now=now,
    )
    locked.save()
    tool.halted_until, tool.halted_reason, tool.halted_at = until, locked.halted_reason, locked.halted_at
    if not was_halted:
        event_emit(
            team_id=tool.team_id,
            event_type="tool.halted",
            data={"tool": tool.name, "reason": envelope.code, "until": rfc3339(until), "reviewer": None},
        )


@transaction.atomic
def tool_resume(*, tool: Tool, actor: str, reviewer: str | None, reason: str, now: datetime | None = None) -> Tool:
    """Close a tool's circuit: by a reviewer, or by the sweep once its time has passed."""
    now = now or timezone.now()
    locked = Tool.objects.select_for_update().get(pk=tool.pk)
    if locked.halted_until is None:
        return locked
    if reviewer is None and locked.halted_until > now:
        return locked  # the sweep raced a new halt
    locked.halted_until = None
    audit_append(
        holder=locked, kind=AuditEvent.Kind.CIRCUIT, actor=actor, reason="resumed", data={"why": reason}, now=now
    )
    locked.save()
    event_emit(
        team_id=locked.team_id,
        event_type="tool.resumed",
        data={"tool": locked.name, "reason": reason, "until": None, "reviewer": reviewer},
    )
    return locked


def due_tools_resume(*, now: datetime | None = None) -> int:
    """Close circuits whose time has passed; returns how many."""
    now = now or timezone.now()
    resumed = 0
    for tool in Tool.objects.filter(halted_until__lte=now):
        if tool_resume(tool=tool, actor=SYSTEM, reviewer=None, reason="cooldown_elapsed", now=now).halted_until is None:
            resumed += 1
    return resumed
