"""The doorbell: ask a worker, by its task's name, to do now what beat's sweep does anyway.

One rule for every task: a ring is skipped while the task's mark stands. A ring that reaches the
broker sets the mark, for every process (the cache), for `quiet_s`; the task clears it as it
starts (`doorbell_answered`), since from then on it can miss what commits, so the next ring must
go. A burst of commits rings once, not once per commit. The mark is only a hint: a cache that
cannot answer skips no ring, and a ring the broker refused leaves no mark, so the next one tries
(config.celery.publish_hint pauses publishes after a failure). Never raises: what rang is
committed, and the sweep covers a lost ring.

By name (Celery's registry, filled as each app's ready() imports its tasks), so a module that
rings imports no tasks module, and no import circle runs through it.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from django.core.cache import cache

from config.celery import app, publish_hint

logger = logging.getLogger(__name__)

MARK_KEY = "holdpoint:doorbell:{}"
_clock = time.time  # the mark holds its end by this clock, which a test may set


def doorbell_ring(task_name: str, *, quiet_s: float) -> bool:
    """Publish the task named `task_name` ("app.tasks.function") unless its mark stands; whether
    it was published."""
    try:
        if not _mark(task_name, quiet_s):
            return False
        if publish_hint(_task(task_name)):
            return True
        doorbell_answered(task_name)  # nothing is queued: the next ring must try again
    except Exception:
        doorbell_answered(task_name)
        logger.warning("could not ring for %s; beat's sweep does its work", task_name, exc_info=True)
    return False


def doorbell_answered(task_name: str) -> None:
    """The task has started (or no ring reached the broker): the next ring goes."""
    try:
        cache.delete(MARK_KEY.format(task_name))
    except Exception:
        logger.warning("the cache is unavailable; the doorbell's mark expires by itself", exc_info=True)


def _mark(task_name: str, quiet_s: float) -> bool:
    """Set the mark; True when this ring should go (it set it, or the cache cannot say)."""
    key, now = MARK_KEY.format(task_name), _clock()
    timeout = math.ceil(quiet_s) + 1  # the cache forgets a mark soon after it ends
    try:
        if cache.add(key, now + quiet_s, timeout=timeout):
            return True
        ends = cache.get(key)
        if isinstance(ends, int | float) and now < ends:
            return False
        cache.set(key, now + quiet_s, timeout=timeout)  # an ended mark: two rings at worst
        return True
    except Exception:
        logger.warning("the cache is unavailable; ringing for %s unmarked", task_name, exc_info=True)
        return True


def _task(task_name: str) -> Any:
    return app.tasks[task_name]
