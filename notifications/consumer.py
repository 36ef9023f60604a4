"""The notifications consumer of the core's event stream (envelopes.events).

Runs in the transaction of the change: it only writes rows (Notices for the channels that want
the event, Watches for the reminders, warnings and escalations a held step may owe) and asks
for a send once that transaction commits. Nothing here touches the network, and an event no
channel can want (most of them: a retry window, a success) costs no query at all."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from envelopes.models import Step

from .models import MAX_REMINDERS, Channel, Notice, Watch

logger = logging.getLogger(__name__)

# The held state a step entered -> the event that announces it.
ENTERED = {
    "awaiting_approval": "approval.requested",
    "verifying": "verification.requested",
    "escalated": "step.escalated",
}
EXPIRY_WARNING_MAX = timedelta(hours=1)


def expiry_warning_at(*, entered_at: datetime, expires_at: datetime) -> datetime:
    """When an approval request is "expiring": a tenth of its TTL left, or one hour left when
    the TTL is longer than ten hours (whichever leaves less time)."""
    ttl = max(timedelta(0), expires_at - entered_at)
    return expires_at - min(ttl / 10, EXPIRY_WARNING_MAX)


def watch_next_due(watch: Watch, channel: Channel, *, expires_at: datetime | None) -> datetime | None:
    """The next moment this watch owes something (a reminder, the expiry warning, the
    escalation), or None when it owes nothing more."""
    due: list[datetime] = []
    if "step.overdue" in channel.events and watch.reminders < MAX_REMINDERS:
        due.append(watch.announced_at + timedelta(seconds=channel.remind_after_s * (watch.reminders + 1)))
    if (
        watch.state == "awaiting_approval"
        and "approval.expiring" in channel.events
        and not watch.expiring_sent
        and expires_at is not None
    ):
        due.append(expiry_warning_at(entered_at=watch.entered_at, expires_at=expires_at))
    if channel.escalate_to_id is not None and channel.escalate_after_s is not None and not watch.escalated:
        due.append(watch.announced_at + timedelta(seconds=channel.escalate_after_s))
    return min(due, default=None)


def wants_watch(channel: Channel, state: str) -> bool:
    return (
        "step.overdue" in channel.events
        or (state == "awaiting_approval" and "approval.expiring" in channel.events)
        or (channel.escalate_to_id is not None and channel.escalate_after_s is not None)
    )


def event_consume(*, team_id: int, event_type: str, data: dict[str, Any], step_id: int | None = None) -> int:
    """Write the notices (and watches) an event calls for; returns how many notices."""
    if event_type == "tool.halted":
        return _halt_notices(team_id=team_id, data=data)
    if event_type != "step.state_changed" or step_id is None:
        return 0
    step_data = data.get("step") or {}
    event = ENTERED.get(step_data.get("state", ""))
    if event is None:
        return 0
    tool = step_data.get("tool")
    channels = [channel for channel in Channel.objects.enabled().filter(team_id=team_id) if channel.wants_tool(tool)]
    if not channels:
        return 0
    step = Step.objects.select_related("tool").get(pk=step_id)
    if step.state != step_data.get("state"):
        return 0
    now = timezone.now()
    seen = set(
        Notice.objects.filter(step=step, entered_at=step.state_entered_at, event=event).values_list(
            "channel_id", flat=True
        )
    )
    halted = step.tool.is_halted(now)
    notices = [
        Notice(
            team_id=team_id,
            channel=channel,
            event=event,
            step=step,
            tool=step.tool.name,
            entered_at=step.state_entered_at,
            data=data["step"],
            # A held step of a halted tool: the halt's one message speaks for it.
            status=Notice.Status.FOLDED if halted and "tool.halted" in channel.events else Notice.Status.PENDING,
            created_at=now,
        )
        for channel in channels
        if channel.pk not in seen and event in channel.events
    ]
    Notice.objects.bulk_create(notices)
    watches = []
    for channel in channels:
        if channel.pk in seen or not wants_watch(channel, step.state):
            continue
        watch = Watch(
            team_id=team_id,
            channel=channel,
            step=step,
            state=step.state,
            entered_at=step.state_entered_at,
            announced_at=now,
        )
        watch.due_at = watch_next_due(watch, channel, expires_at=step.expires_at)
        watches.append(watch)
    Watch.objects.bulk_create(watches, ignore_conflicts=True)
    _enqueue_if_sendable([notice.channel for notice in notices if notice.status == Notice.Status.PENDING], now)
    return len(notices)


def _enqueue_if_sendable(channels: list[Channel], now: datetime) -> None:
    """Ask for a send after commit only when one of these channels may send now; inside its
    batching window beat's sweep sends the digest at the window's end (a burst of events is
    one enqueue per window, not one per event)."""
    if any(channel.window_ends_at is None or channel.window_ends_at <= now for channel in channels):
        transaction.on_commit(enqueue_notify)


def _halt_notices(*, team_id: int, data: dict[str, Any]) -> int:
    tool = data.get("tool")
    channels = [
        channel for channel in Channel.objects.enabled().filter(team_id=team_id) if channel.wants("tool.halted", tool)
    ]
    now = timezone.now()
    Notice.objects.bulk_create(
        Notice(
            team_id=team_id,
            channel=channel,
            event="tool.halted",
            tool=tool or "",
            data={"tool": tool, "reason": data.get("reason"), "until": data.get("until")},
            created_at=now,
        )
        for channel in channels
    )
    _enqueue_if_sendable(channels, now)
    return len(channels)


def enqueue_notify() -> None:
    """Ask a worker to send now. Never raises: the notices are committed, and beat's sweep
    sends them anyway if the broker is down."""
    try:
        from .tasks import notify

        notify.apply_async(retry=False)
    except Exception:
        logger.warning("could not enqueue notifications; the sweep will send them", exc_info=True)
