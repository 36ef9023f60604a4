"""Success reports posted after the result is returned (`report_success="after"`, issue 29).

The agent needs Holdpoint's answer before a write (the gate) and after a failure (the
directive), not after a success, whose directive is always `stop`. So a success's envelope may
be posted after the result is handed back. If it is lost (a crash), the step keeps a granted
attempt with no report, and the gate sends such a step to verification before any new write
(contract §4: `verification_required`): nothing is written twice, at worst one verification
is asked. Failures are never queued: their directive matters now.

One queue per client, of at most `maxsize` reports, posted in order by one worker, each under
its own Idempotency-Key, retried with that key (a retry of a post that did arrive gets the
stored answer, not a second record). A full queue posts the new report at once: the agent
slows down, nothing is dropped. `close` flushes what is queued (`atexit` too, for the
threaded queue); what cannot be delivered by then is logged, and its steps will verify.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import HoldpointError, HoldpointUnavailable, ServerError, Throttled

logger = logging.getLogger("holdpoint_sdk")

ReportSuccess = Literal["before", "after"]
REPORT_SUCCESS_MODES = ("before", "after")
DEFAULT_QUEUE_SIZE = 1000
# Between a report's tries, after the client's own retries of each post: about five minutes in
# all, then it is given up (its step verifies at the next gate call).
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 60.0, 60.0, 60.0)
FLUSH_TIMEOUT_S = 10.0
_UNDELIVERED = (HoldpointUnavailable, ServerError, Throttled)

# The directive a success's envelope is answered with (contract §4): returned at once when
# the report goes after the result.
SUCCESS_DIRECTIVE: dict[str, Any] = {"action": "stop", "may_write": False, "not_before": None, "reason": "committed"}


def check_mode(mode: str) -> ReportSuccess:
    if mode not in REPORT_SUCCESS_MODES:
        raise ValueError(f"report_success is 'before' or 'after', not {mode!r}")
    return "after" if mode == "after" else "before"


@dataclass(frozen=True)
class PendingReport:
    envelope: Mapping[str, Any]
    idempotency_key: str
    dialect: str = "canonical"
    # The caller's context when it was queued (its trace, contract §13): the post runs in it.
    context: contextvars.Context = field(default_factory=contextvars.copy_context)

    @property
    def operation_ref(self) -> str:
        inner = self.envelope.get("structuredContent")  # the mcp dialect's envelope
        source = inner if isinstance(inner, Mapping) else self.envelope
        return str(source.get("operation_ref", "?"))


def _given_up(report: PendingReport, error: HoldpointError) -> None:
    logger.error(
        "holdpoint: the success report of %s was not delivered (%s: %s); the step will ask for verification",
        report.operation_ref, error.code, error.detail,
    )  # fmt: skip


class ReportQueue:
    """The threaded queue of a `Holdpoint` client: a daemon thread posts the reports."""

    def __init__(
        self,
        post: Callable[[PendingReport], Any],
        *,
        maxsize: int = DEFAULT_QUEUE_SIZE,
        retry_delays: tuple[float, ...] = RETRY_DELAYS_S,
    ) -> None:
        self._post = post
        self._queue: queue.Queue[PendingReport | None] = queue.Queue(maxsize)
        self._retry_delays = retry_delays
        self._giving_up = threading.Event()  # set when a flush's time is out: no more waits
        self._thread: threading.Thread | None = None
        self._lock = threading.Condition()
        self._pending = 0  # queued or being posted
        self._refs: dict[str, int] = {}  # operation_ref -> its reports queued or being posted
        self._closed = False
        atexit.register(_close_at_exit, weakref.ref(self))

    def __len__(self) -> int:
        return self._pending

    def submit(self, report: PendingReport) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the client is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="holdpoint-reports", daemon=True)
                self._thread.start()
            self._pending += 1
            self._refs[report.operation_ref] = self._refs.get(report.operation_ref, 0) + 1
        try:
            self._queue.put_nowait(report)
        except queue.Full:
            try:
                self._deliver(report)  # bounded: the caller waits, the report is not dropped
            finally:
                self._done(report)

    def _done(self, report: PendingReport) -> None:
        with self._lock:
            self._pending -= 1
            left = self._refs.pop(report.operation_ref) - 1
            if left:
                self._refs[report.operation_ref] = left
            self._lock.notify_all()

    def settled(self, operation_ref: str, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait until no report of this step is queued (before its next gate call: a step's
        report lands before its next attempt is asked for, as it would have without a queue)."""
        with self._lock:
            return self._lock.wait_for(lambda: operation_ref not in self._refs, timeout)

    def _run(self) -> None:
        while (report := self._queue.get()) is not None:
            try:
                self._deliver(report)
            finally:
                self._done(report)

    def _deliver(self, report: PendingReport) -> None:
        for delay in (*self._retry_delays, None):
            try:
                report.context.copy().run(self._post, report)
                return
            except _UNDELIVERED as error:
                if delay is None or self._giving_up.is_set():
                    _given_up(report, error)
                    return
                logger.warning("holdpoint: success report of %s not delivered yet (%s); retrying in %g s",
                               report.operation_ref, error.code, delay)  # fmt: skip
                if self._giving_up.wait(delay):
                    _given_up(report, error)
                    return
            except HoldpointError as error:  # refused: retrying the same body cannot help
                _given_up(report, error)
                return

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait until every queued report is delivered (or given up); False after `timeout`."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def close(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        """Flush, then stop the worker; reports still queued after `timeout` are given up."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is None:
            return
        if not self.flush(timeout):
            logger.error("holdpoint: %d success report(s) not delivered at close; their steps will verify",
                         self._pending)  # fmt: skip
            self._giving_up.set()
        self._queue.put(None)
        thread.join(timeout)


def _close_at_exit(ref: weakref.ReferenceType[ReportQueue]) -> None:
    reports = ref()
    if reports is not None:
        reports.close()


class AsyncReportQueue:
    """The asyncio queue of an `AsyncHoldpoint` client (and of holdpoint-mcp): one task posts
    the reports, started in the running loop on the first report; `aclose` flushes it."""

    def __init__(
        self,
        post: Callable[[PendingReport], Coroutine[Any, Any, Any]],
        *,
        maxsize: int = DEFAULT_QUEUE_SIZE,
        retry_delays: tuple[float, ...] = RETRY_DELAYS_S,
    ) -> None:
        self._post = post
        self._maxsize = maxsize
        self._queue: asyncio.Queue[PendingReport | None] | None = None
        self._retry_delays = retry_delays
        self._giving_up = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pending = 0
        self._refs: dict[str, asyncio.Event] = {}  # operation_ref -> set when its reports are done
        self._counts: dict[str, int] = {}
        self._idle = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return self._pending

    async def submit(self, report: PendingReport) -> None:
        if self._closed:
            raise RuntimeError("the client is closed")
        if self._queue is None:
            self._queue = asyncio.Queue(self._maxsize)
            self._task = asyncio.get_running_loop().create_task(self._run(self._queue), name="holdpoint-reports")
        self._pending += 1
        self._idle.clear()
        ref = report.operation_ref
        self._counts[ref] = self._counts.get(ref, 0) + 1
        self._refs.setdefault(ref, asyncio.Event())
        try:
            self._queue.put_nowait(report)
        except asyncio.QueueFull:
            try:
                await self._deliver(report)  # bounded: the caller waits, the report is not dropped
            finally:
                self._done(report)

    def _done(self, report: PendingReport) -> None:
        self._pending -= 1
        ref = report.operation_ref
        self._counts[ref] -= 1
        if not self._counts[ref]:
            del self._counts[ref]
            self._refs.pop(ref).set()
        if not self._pending:
            self._idle.set()

    async def settled(self, operation_ref: str, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait until no report of this step is queued (before its next gate call: a step's
        report lands before its next attempt is asked for, as it would have without a queue)."""
        event = self._refs.get(operation_ref)
        if event is None:
            return True
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _run(self, reports: asyncio.Queue[PendingReport | None]) -> None:
        while (report := await reports.get()) is not None:
            try:
                await self._deliver(report)
            finally:
                self._done(report)

    async def _deliver(self, report: PendingReport) -> None:
        for delay in (*self._retry_delays, None):
            try:
                await asyncio.get_running_loop().create_task(self._post(report), context=report.context.copy())
                return
            except _UNDELIVERED as error:
                if delay is None or self._giving_up.is_set():
                    _given_up(report, error)
                    return
                logger.warning("holdpoint: success report of %s not delivered yet (%s); retrying in %g s",
                               report.operation_ref, error.code, delay)  # fmt: skip
                try:
                    await asyncio.wait_for(self._giving_up.wait(), delay)
                except TimeoutError:
                    continue
                _given_up(report, error)
                return
            except HoldpointError as error:
                _given_up(report, error)
                return

    async def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        if not self._pending:
            return True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def aclose(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is None or self._queue is None:
            return
        if not await self.flush(timeout):
            logger.error("holdpoint: %d success report(s) not delivered at close; their steps will verify",
                         self._pending)  # fmt: skip
            self._giving_up.set()
        await self._queue.put(None)
        try:
            await asyncio.wait_for(self._task, timeout)
        except TimeoutError:
            self._task.cancel()
