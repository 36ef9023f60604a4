"""The notifications consumer of the core's event stream (envelopes.events).

Runs in the transaction of the change: it only writes rows (Notices for the channels that want
the event, Watches for the reminders, warnings and escalations a held step may owe) and asks
for a send once that transaction commits. Nothing here touches the network, and an event no
channel can want (most of them: a retry window, a success) costs no query at all."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models
from django.utils import timezone

from envelopes.after_response import on_commit_later
from envelopes.events import APPROVERS_ESCALATED
from envelopes.rfc3339 import parse_rfc3339
from outbound.doorbell import doorbell_answered, doorbell_ring

from .models import MAX_REMINDERS, Channel, Notice, Watch

# The held state a step entered -> the event that announces it.
ENTERED = {
    "awaiting_approval": "approval.requested",
    "verifying": "verification.requested",
    "escalated": "step.escalated",
}
EXPIRY_WARNING_MAX = timedelta(hours=1)
GROUP_TARGET = "@group:"  # an email channel for one group's members (services.target_clean)


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
    if event_type == APPROVERS_ESCALATED and step_id is not None:
        return _escalation_notices(team_id=team_id, data=data, step_id=step_id)
    if event_type != "step.state_changed" or step_id is None:
        return 0
    step_data = data.get("step") or {}
    event = ENTERED.get(step_data.get("state", ""))
    if event is None:
        return 0
    tool = step_data.get("tool") or ""
    state = step_data["state"]
    # The transition's time, which is the entry's when the state changed: the step's
    # `updated_at` and `state_entered_at` are set from one clock reading. An event that did not
    # change the state (another reason) names no entry: its notices match no live entry and are
    # dropped at the flush, and the announcement of the real entry stays unique.
    entered_at = _moment(step_data.get("updated_at"))
    if entered_at is None:
        return 0
    now = timezone.now()
    channels, announced = _announce(
        team_id=team_id,
        event=event,
        step_id=step_id,
        tool=tool,
        entered_at=entered_at,
        now=now,
        group=step_data.get("approver_group") or "",
    )
    if not channels:
        return 0
    watches = []
    for channel in channels:
        if not wants_watch(channel, state):
            continue
        watch = Watch(
            team_id=team_id, channel=channel, step_id=step_id, state=state, entered_at=entered_at, announced_at=now
        )
        watch.due_at = watch_next_due(watch, channel, expires_at=None)
        if state == "awaiting_approval" and "approval.expiring" in channel.events:
            watch.due_at = now  # the sweep reads the expiry and sets the real time
        watches.append(watch)
    Watch.objects.bulk_create(watches, ignore_conflicts=True)
    _enqueue_if_sendable(announced, now)
    return len(announced)


Announced = tuple[list[Channel], list[Channel]]  # the channels that follow the tool; those told


def _escalation_notices(*, team_id: int, data: dict[str, Any], step_id: int) -> int:
    """A request for approval escalated to a group: announced to that group's channels alone,
    as a request for approval of the same entry (one announcement per channel and entry)."""
    step_data, group = data.get("step") or {}, str(data.get("group") or "")
    entered_at = _moment(data.get("entered_at"))
    if entered_at is None or not group:
        return 0
    now = timezone.now()
    _, announced = _announce(
        team_id=team_id,
        event=ENTERED["awaiting_approval"],
        step_id=step_id,
        tool=step_data.get("tool") or "",
        entered_at=entered_at,
        now=now,
        group=group,
        only_group=True,
        data={"escalated_to": group, "after_s": data.get("after_s")},
    )
    _enqueue_if_sendable(announced, now)
    return len(announced)


def _announce(
    *,
    team_id: int,
    event: str,
    step_id: int,
    tool: str,
    entered_at: datetime,
    now: datetime,
    group: str = "",
    only_group: bool = False,
    data: dict[str, Any] | None = None,
) -> Announced:
    """Read the team's channels that follow the tool and write a notice for each that wants the
    event: one statement on PostgreSQL (this runs inside every transition that holds a step, so
    a team with channels pays one statement, as a team without them does for the read alone);
    on SQLite, which has no writing WITH query, the same two parts one after the other. A
    channel for a group (`@group:NAME`) follows only the steps that group decides (`group`);
    `only_group`: only that group's channels."""
    params = {
        "team": team_id,
        "tool": tool,
        "event": event,
        "step": step_id,
        "entered": _prep("entered_at", entered_at),
        "now": _prep("created_at", now),
        "data": _prep("data", data or {}),
        "status": Notice.Status.PENDING.value,
        "group_target": GROUP_TARGET + group if group else "",
        "only_group": only_group,
    }
    statements = _announce_sql(connection.vendor)
    *writes, read = statements
    for write in writes:
        with connection.cursor() as cursor:
            cursor.execute(write, params)
    channels = list(Channel.objects.raw(read, params))
    return channels, [channel for channel in channels if channel.__dict__["wants_event"]]  # raw()'s extra column


def _prep(name: str, value: object) -> Any:
    """A value as the ORM would write it to Notice's column `name` (each database its own way)."""
    field = Notice._meta.get_field(name)
    assert isinstance(field, models.Field)
    return field.get_db_prep_save(value, connection=connection)


# How each database asks whether a JSON list (the channel's tools, its events) holds a string.
JSON_LIST = {
    "postgresql": ("{column} = '[]'::jsonb", "{column} ? {value}"),
    "sqlite": ("json_array_length({column}) = 0", "EXISTS (SELECT 1 FROM json_each({column}) WHERE value = {value})"),
}


@functools.cache
def _announce_sql(vendor: str) -> tuple[str, ...]:
    """The statements of `_announce`, the last one answering the channels that follow the tool
    (enabled, every tool or this one), each with whether it wants the event; before it, the
    INSERT of one notice for each that does. One announcement per (channel, step, event,
    entry): a repeated event adds nothing (ON CONFLICT DO NOTHING)."""
    empty, holds = JSON_LIST[vendor]
    wants_event = holds.format(column="events", value="%(event)s")
    follows_tool = f"{empty.format(column='tools')} OR {holds.format(column='tools', value='%(tool)s')}"
    # A group's channel follows its group's steps only; with only_group, only it follows.
    follows_group = (
        f"(substr(target, 1, {len(GROUP_TARGET)}) <> '{GROUP_TARGET}' AND NOT %(only_group)s) "
        "OR target = %(group_target)s"
    )
    chosen = (
        "SELECT id, team_id, events, remind_after_s, escalate_to_id, escalate_after_s, window_ends_at, "  # noqa: S608 (no values)
        f"{wants_event} AS wants_event FROM notifications_channel "
        f"WHERE team_id = %(team)s AND disabled_at IS NULL AND ({follows_tool}) AND ({follows_group}) ORDER BY id"
    )
    insert = (
        "INSERT INTO notifications_notice "
        "(team_id, channel_id, event, step_id, tool, entered_at, data, status, created_at) "
        "SELECT %(team)s, id, %(event)s, %(step)s, %(tool)s, %(entered)s, %(data)s, %(status)s, %(now)s "
        "FROM chosen WHERE wants_event ON CONFLICT DO NOTHING"
    )
    if vendor == "postgresql":  # one round trip: the INSERT as a writing WITH query
        return (f"WITH chosen AS ({chosen}), added AS ({insert}) SELECT * FROM chosen",)  # noqa: S608
    return f"WITH chosen AS ({chosen}) {insert}", chosen


def _moment(value: object) -> datetime | None:
    return parse_rfc3339(value) if isinstance(value, str) else None


def _enqueue_if_sendable(channels: list[Channel], now: datetime) -> None:
    """Ask for a send after commit only when one of these channels may send now; inside its
    batching window beat's sweep sends the digest at the window's end (a burst of events is
    one enqueue per window, not one per event)."""
    if any(channel.window_ends_at is None or channel.window_ends_at <= now for channel in channels):
        on_commit_later(enqueue_notify)


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


NOTIFY_TASK = "notifications.tasks.notify"
# One send task drains every pending notice, so a burst of held steps (before a worker has opened
# the channels' batching windows, or with no worker) rings once a second at most until it starts.
# A notice committed after that task ran waits for beat's sweep at worst: the ring is an
# optimisation, the sweep the rule.
ENQUEUE_GAP_S = 1.0


def enqueue_notify() -> None:
    """Ask a worker to send now (outbound.doorbell). Never raises: the notices are committed,
    and beat's sweep sends them anyway if the broker is down."""
    doorbell_ring(NOTIFY_TASK, quiet_s=ENQUEUE_GAP_S)


def notify_started() -> None:
    """The send task has started: the next notice rings again."""
    doorbell_answered(NOTIFY_TASK)
