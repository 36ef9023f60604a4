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
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from envelopes.models import Attempt, AuditEvent, Envelope

if TYPE_CHECKING:
    from .aggregates import HourCounts

HOUR = timedelta(hours=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BATCH = 5000


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ceil_hour(moment: datetime) -> datetime:
    floored = floor_hour(moment)
    return floored if floored == moment else floored + HOUR


def micros(moment: datetime) -> int:
    """A time as whole microseconds since the epoch: an exact, comparable JSON key."""
    return (moment - EPOCH) // timedelta(microseconds=1)


def _batches(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), _BATCH):
        yield ids[start : start + _BATCH]


def count_active_steps(
    tool_ids: list[int], start: datetime, end: datetime, counts: Callable[[int, datetime], HourCounts]
) -> None:
    """Add the units and retractions of the steps active in [start, end) to `counts(tool, hour)`.

    Activity comes from the per-tool time indexes (envelopes; grants are audited as transitions
    with reason attempt_granted); the history of just those steps from the per-step indexes.
    """
    active: dict[int, tuple[int, set[datetime]]] = {}
    envelopes = Envelope.objects.filter(tool_id__in=tool_ids, received_at__gte=start, received_at__lt=end)
    grants = AuditEvent.objects.filter(
        tool_id__in=tool_ids,
        kind=AuditEvent.Kind.TRANSITION,
        reason="attempt_granted",
        created_at__gte=start,
        created_at__lt=end,
    )
    for rows in (
        envelopes.values_list("tool_id", "step_id", "received_at"),
        grants.values_list("tool_id", "step_id", "created_at"),
    ):
        for tool_id, step_id, moment in rows:
            active.setdefault(step_id, (tool_id, set()))[1].add(floor_hour(moment))
    if not active:
        return
    history: dict[int, list[tuple[datetime, int]]] = defaultdict(list)
    for batch in _batches(sorted(active)):
        for step_id, moment, attempt in Envelope.objects.filter(step_id__in=batch, received_at__lt=end).values_list(
            "step_id", "received_at", "attempt"
        ):
            history[step_id].append((moment, attempt or 0))
        for step_id, moment, number in Attempt.objects.filter(step_id__in=batch, granted_at__lt=end).values_list(
            "step_id", "granted_at", "number"
        ):
            history[step_id].append((moment, number))
    for step_id, (tool_id, hours) in active.items():
        events = sorted(history[step_id])
        for hour in sorted(hours):
            unit_start, unit_end = max(start, hour), min(end, hour + HOUR)
            used = max((value for moment, value in events if moment < unit_end), default=0)
            unit = counts(tool_id, hour)
            unit.active_steps += 1
            unit.active_step_attempts += used
            earlier = [(moment, value) for moment, value in events if moment < unit_start]
            if earlier:
                previous = micros(earlier[-1][0])
                entry = unit.step_retractions.setdefault(previous, [0, 0])
                entry[0] += 1
                entry[1] += max(value for _, value in earlier)


def attempts_per_step(counts: HourCounts, since: datetime) -> float | None:
    """The mean over a window whose counts (all its hours merged) are `counts`."""
    steps, attempts = counts.active_steps, counts.active_step_attempts
    since_us = micros(since)
    for previous, (n, used) in counts.step_retractions.items():
        if previous >= since_us:
            steps -= n
            attempts -= used
    return None if steps <= 0 else attempts / steps
