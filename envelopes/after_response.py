"""Work the caller need not wait for, run once the response has been sent.

Some of a request's work only asks a worker to hurry: after an event is committed, enqueue a
webhook delivery (`webhooks.outbox.enqueue_delivery`: a Redis `SET NX`, and when a worker has
started the previous task, Celery's `apply_async`: ~0.5 ms of CPU and two more Redis round
trips) or a notification send. An agent waiting for its grant gains nothing from it (issue 14),
so `later(work)` keeps it until the response is on the wire: Django sends `request_finished`
when the WSGI server closes the response, which gunicorn (and wsgiref, and Django's test client)
do after writing all of it.

The worker's thread still does the work before it takes this connection's next request (gunicorn's
gthread worker reads a keep-alive connection again once the request's handling has returned):
calls sent back to back on one connection wait for it all the same; an agent that does anything
between two calls, such as running the tool it was just granted, does not.

Outside a request (a Celery task, a management command, a shell) `later` runs the work at once.
Only a hint may be deferred here: work whose loss a rule already covers (beat's sweep delivers
and sends what an enqueue would have hurried), because a process killed between its response and
`request_finished` never runs it. Each piece runs alone: one that raises is logged and the next
runs.

Per thread, as gunicorn's gthread worker serves one request per thread at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.core.signals import request_finished, request_started
from django.db import transaction

logger = logging.getLogger(__name__)

_state = threading.local()


def later(work: Callable[[], object]) -> None:
    """Run `work` once this thread's request has its response sent; now outside a request."""
    pending: list[Callable[[], object]] | None = getattr(_state, "pending", None)
    if pending is None:
        _run([work])
    else:
        pending.append(work)


def on_commit_later(work: Callable[[], object]) -> None:
    """`work` once the current transaction commits (never if it rolls back), and after the
    response when that is in a request: `transaction.on_commit` then `later`."""
    transaction.on_commit(lambda: later(work))


def _run(works: list[Callable[[], object]]) -> None:
    for work in works:
        try:
            work()
        except Exception:
            logger.exception("work deferred past the response failed: %r", work)


def _started(**kwargs: Any) -> None:
    leftover: list[Callable[[], object]] | None = getattr(_state, "pending", None)
    _state.pending = []
    if leftover:  # a request before this one that was never closed: its work is still owed
        _run(leftover)


def _finished(**kwargs: Any) -> None:
    pending: list[Callable[[], object]] | None = getattr(_state, "pending", None)
    _state.pending = None
    if pending:
        _run(pending)


request_started.connect(_started, dispatch_uid="holdpoint-after-response-started")
request_finished.connect(_finished, dispatch_uid="holdpoint-after-response-finished")
