"""The doorbell: ask a worker, by its task's name, to do now what beat's sweep does anyway.

One rule for every task: a ring is skipped while the task's mark stands. A ring that reaches the
broker sets the mark, for every process (the cache), for `quiet_s`; the task clears it as it
starts (`doorbell_answered`), since from then on it can miss what commits, so the next ring must
go. A burst of commits rings once, not once per commit. The mark is only a hint: while the cache
cannot answer, each process keeps its own marks for at most LOCAL_QUIET_S (a task's start clears
them only in its own process, so they are short: a burst rings about once a second per process,
not once per commit, and nothing waits on a cache that is down: it is asked again after
CACHE_RETRY_S), and a ring the broker refused leaves no mark, so the next one tries
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

from config.cache import add_or_get
from config.celery import app, publish_hint

logger = logging.getLogger(__name__)

MARK_KEY = "holdpoint:doorbell:{}"
_clock = time.time  # the mark holds its end by this clock, which a test may set
_monotonic = time.monotonic  # when to ask a down cache again, by this one
CACHE_RETRY_S = 2.0  # after a cache failure, the cache is asked again after this long
LOCAL_QUIET_S = 1.0  # the longest a process's own mark stands
WARN_EVERY_S = 60.0
# This process's marks while the cache is down (task name -> end), and when to ask it again. A
# race between threads rings twice at worst, as an ended mark does.
_local_marks: dict[str, float] = {}
_cache_down_until = [0.0]
_last_warning = [0.0]


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
    _local_marks.pop(task_name, None)
    if _cache_down():
        return
    try:
        cache.delete(MARK_KEY.format(task_name))
    except Exception as error:
        _cache_failed(error)


def _mark(task_name: str, quiet_s: float) -> bool:
    """Set the mark; True when this ring should go (it set it, or no mark stands)."""
    key, now = MARK_KEY.format(task_name), _clock()
    if not _cache_down():
        timeout = math.ceil(quiet_s) + 1  # the cache forgets a mark soon after it ends
        try:
            added, ends = add_or_get(cache, key, now + quiet_s, timeout)
            if added:
                return True
            if isinstance(ends, int | float) and now < ends:
                return False
            cache.set(key, now + quiet_s, timeout=timeout)  # an ended mark: two rings at worst
            return True
        except Exception as error:
            _cache_failed(error)
    ends = _local_marks.get(task_name)
    if ends is not None and now < ends:
        return False
    _local_marks[task_name] = now + min(quiet_s, LOCAL_QUIET_S)
    return True


def _cache_down() -> bool:
    return _monotonic() < _cache_down_until[0]


def _cache_failed(error: Exception) -> None:
    """Ask the cache again only after CACHE_RETRY_S, and warn at most once a minute per process:
    a down cache must not cost every commit a failed round trip and a logged traceback."""
    now = _monotonic()
    _cache_down_until[0] = now + CACHE_RETRY_S
    if _last_warning[0] == 0.0 or now - _last_warning[0] >= WARN_EVERY_S:
        _last_warning[0] = now
        logger.warning(
            "the cache cannot be reached (%s: %s); the doorbell keeps its marks in this process",
            type(error).__name__,
            error,
        )


def _task(task_name: str) -> Any:
    return app.tasks[task_name]
