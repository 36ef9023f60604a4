"""Reads for other pages: a step's notifications, for its timeline ("notified <channel>")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .models import Notice, SendTry


@dataclass(frozen=True)
class StepSend:
    """One try of a message that announced the step: "notified <channel>" (or its failure)."""

    at: datetime
    channel: str
    event: str
    ok: bool
    error: str
    digest: bool

    @property
    def text(self) -> str:
        return f"notified {self.channel}" if self.ok else f"notifying {self.channel} failed: {self.error}"


def step_sends(step_id: int, *, limit: int = 100) -> list[StepSend]:
    """Every try of every message that carried one of the step's notices, oldest first."""
    tries = list(
        SendTry.objects.for_step(step_id).select_related("message__channel").order_by("tried_at", "id")[:limit]
    )
    events = dict(
        Notice.objects.filter(step_id=step_id, message__in={attempt.message_id for attempt in tries}).values_list(
            "message_id", "event"
        )
    )
    return [
        StepSend(
            at=attempt.tried_at,
            channel=attempt.message.channel.label,
            event=events.get(attempt.message_id, attempt.message.kind),
            ok=attempt.ok,
            error=attempt.error,
            digest=attempt.message.kind == "digest",
        )
        for attempt in tries
    ]
