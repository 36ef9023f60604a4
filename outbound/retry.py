"""When a failed outbound try is tried again (contract §5): webhooks and notifications alike."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

# Delays after each failed try: about 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h.
RETRY_SCHEDULE = tuple(
    timedelta(seconds=seconds) for seconds in (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
)
MAX_TRIES = len(RETRY_SCHEDULE) + 1
JITTER = 0.1  # each delay is stretched or shrunk by up to 10 %


def retry_after_seconds(value: str | None, *, now: datetime) -> float | None:
    """A Retry-After header, in seconds: delta-seconds or an HTTP date."""
    if not value or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


def retry_delay(tries: int, *, retry_after: float | None = None) -> timedelta | None:
    """How long to wait after the `tries`-th try failed; None when it was the last.

    Retry-After is honoured when it asks for longer than the schedule, up to the schedule's
    longest delay (a receiver cannot park a message for a week)."""
    if tries >= MAX_TRIES:
        return None
    base = RETRY_SCHEDULE[max(tries, 1) - 1].total_seconds()
    seconds = base * random.uniform(1 - JITTER, 1 + JITTER)
    if retry_after is not None and retry_after > seconds:
        seconds = min(retry_after, RETRY_SCHEDULE[-1].total_seconds())
    return timedelta(seconds=seconds)
