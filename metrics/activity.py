"""Steps active in a range of time, counted so that hours add up into any window.

`attempts_per_step` (contract §6) is the mean over the steps that had an envelope or an
attempt in the window, and a step active in several hours must count once. Each hour therefore
records, for every step active in it (a *unit*), the step's attempts after its last activity
in that hour; and, when the step was active before that hour, the time of that previous
activity and the attempts it left (a *retraction*). Over a window, a step's units form a chain;
subtracting every unit whose successor is also in the window (the retractions whose previous
activity is at or after `since`) leaves exactly one unit per step: its last one in the window.

So the attempts counted are the ones the step had used by the end of the window: for a window
that ends now, its Step.attempts. (Step.attempts is the running maximum of its grant numbers
and of the `attempt` its envelopes reported.)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import BigIntegerField, Expression, F, Func, Max, Q

from envelopes.models import Attempt, AuditEvent, Envelope

from .counts import HourCounts

HOUR = timedelta(hours=1)
_BATCH = 2000
DAY = timedelta(days=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ceil_hour(moment: datetime) -> datetime:
    floored = floor_hour(moment)
    return floored if floored == moment else floored + HOUR


def floor_day(moment: datetime) -> datetime:
    return floor_hour(moment).replace(hour=0)


def ceil_day(moment: datetime) -> datetime:
    floored = floor_day(moment)
    return floored if floored == moment else floored + DAY


def micros(moment: datetime) -> int:
    """A time as whole microseconds since the epoch: an exact, comparable JSON key."""
    return (moment - EPOCH) // timedelta(microseconds=1)


class EpochMicros(Func):
    """A timestamp as whole microseconds since the epoch, computed by PostgreSQL: an integer is
    read far faster than a timestamp with a time zone, and these queries read thousands."""

    output_field = BigIntegerField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = "(EXTRACT(EPOCH FROM %(expressions)s) * 1000000)::bigint"
        return self.as_sql(compiler, connection, template=template, **extra)


def _moment(field: str) -> Expression | F:
    return EpochMicros(field) if connection.vendor == "postgresql" else F(field)


def _micros(value: int | datetime) -> int:
    return value if isinstance(value, int) else micros(value)


HOUR_US = 3_600_000_000


def count_active_steps(
    tool_ids: list[int], start: datetime, end: datetime, counts: Callable[[int, datetime], HourCounts]
) -> None:
    """Add the units and retractions of the steps active in [start, end) to `counts(tool, hour)`.

    The activity comes from the per-tool time indexes: envelopes, and grants (audited as
    transitions with reason attempt_granted). A grant's number is the step's attempts so far
    plus one, so replaying the activity from the step's state at `start` (its attempts and last
    activity then: one aggregate row per step, on the per-step indexes) gives every unit.
    Times are integers (µs since the epoch) throughout.
    """
    activity: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # (µs, grant?, attempt)
    tool_of: dict[int, int] = {}
    envelopes = Envelope.objects.filter(tool_id__in=tool_ids, received_at__gte=start, received_at__lt=end)
    for tool_id, step_id, moment, attempt, closed in envelopes.values_list(
        "tool_id", "step_id", _moment("received_at"), "attempt", "step_closed"
    ):
        tool_of[step_id] = tool_id
        # An envelope for a closed step is activity, but changes nothing, its attempt included.
        activity[step_id].append((_micros(moment), 0, 0 if closed else attempt or 0))
    # Grants, and the transitions that created steps: a step created in the range had nothing
    # before it, so only the others need their state at `start` looked up.
    transitions = AuditEvent.objects.filter(
        Q(reason="attempt_granted") | Q(before=""),
        tool_id__in=tool_ids,
        kind=AuditEvent.Kind.TRANSITION,
        created_at__gte=start,
        created_at__lt=end,
    )
    created = set()
    for tool_id, step_id, moment, reason, before_state in transitions.values_list(
        "tool_id", "step_id", _moment("created_at"), "reason", "before"
    ):
        if not before_state:
            created.add(step_id)
        if reason == "attempt_granted":
            tool_of[step_id] = tool_id
            activity[step_id].append((_micros(moment), 1, 0))
    if not activity:
        return
    before: dict[int, tuple[int, int]] = {}  # step -> (last activity before start, attempts then)
    ids = sorted(set(activity) - created)
    for first in range(0, len(ids), _BATCH):
        batch = ids[first : first + _BATCH]
        for rows in (
            Envelope.objects.filter(step_id__in=batch, received_at__lt=start)
            .values("step_id")
            .annotate(last=Max(_moment("received_at")), top=Max("attempt", filter=Q(step_closed=False)))
            .values_list("step_id", "last", "top"),
            Attempt.objects.filter(step_id__in=batch, granted_at__lt=start)
            .values("step_id")
            .annotate(last=Max(_moment("granted_at")), top=Max("number"))
            .values_list("step_id", "last", "top"),
        ):
            for step_id, last, top in rows:
                known = before.get(step_id, (0, 0))
                before[step_id] = (max(known[0], _micros(last)), max(known[1], top or 0))
    hours: dict[int, datetime] = {}
    for step_id, events in activity.items():
        events.sort()
        last, attempts = before.get(step_id, (0, 0))
        hour = -1
        previous: tuple[int, int] | None = None
        for moment, is_grant, reported in events:
            if moment - moment % HOUR_US != hour:
                if hour >= 0:
                    _unit(counts(tool_of[step_id], hours[hour]), attempts, previous)
                hour = moment - moment % HOUR_US
                hours.setdefault(hour, EPOCH + timedelta(microseconds=hour))
                previous = (last, attempts) if last else None
            attempts = attempts + 1 if is_grant else max(attempts, reported)
            last = moment
        _unit(counts(tool_of[step_id], hours[hour]), attempts, previous)


def _unit(counts: HourCounts, attempts: int, previous: tuple[int, int] | None) -> None:
    counts.active_steps += 1
    counts.active_step_attempts += attempts
    if previous is not None:
        entry = counts.step_retractions.setdefault(str(previous[0]), [0, 0])
        entry[0] += 1
        entry[1] += previous[1]


def attempts_per_step(counts: HourCounts, since: datetime) -> float | None:
    """The mean over a window whose counts (all its hours merged) are `counts`."""
    steps, attempts = counts.active_steps, counts.active_step_attempts
    since_us = micros(since)
    for previous, (n, used) in counts.step_retractions.items():
        if int(previous) >= since_us:
            steps -= n
            attempts -= used
    return None if steps <= 0 else attempts / steps
