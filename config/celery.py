"""Celery app: `celery -A config worker --beat` runs the worker and its timers.

Beat keeps its schedule in memory (`celery.beat:Scheduler`, CELERY_BEAT_SCHEDULER): every timer
Holdpoint has is a `due_at` column that a periodic sweep reads, so nothing is lost when beat
forgets when it last sent a sweep, and no file is left that a killed beat could leave corrupt
for the next start to trip over.
"""

import logging
import os
import time
from pathlib import Path
from typing import Any

import kombu
from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("holdpoint")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_process_shutdown.connect
def _spans_flushed(**kwargs: object) -> None:
    """A prefork child leaves by os._exit, past the SDK's atexit flush: send the batch it holds
    (nothing without OTEL_EXPORTER_OTLP_ENDPOINT; telemetry.spans)."""
    from telemetry import spans

    spans.flush()


@app.on_after_configure.connect
def _create_filesystem_broker_folders(sender: Celery, **kwargs: object) -> None:
    """Kombu's filesystem broker (the embedded default) does not create its folders. (Not on
    `on_configure`: reading `sender.conf` while the configuration loads loads it again, and the
    recursion is logged as an error by every process that configures the app.)"""
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)


def _default_channel_forgotten_at_close() -> None:
    """A kombu Connection forgets its default channel once it closed it. kombu 5.7 keeps it:
    when the Redis broker goes away, a worker's consumer closes its connection twice (the
    blueprint's restart, then the connection error's handler); the first close fails partway
    on the dead server and drops the transport, and the second closes the old channel again,
    which then tries to restore its unacknowledged messages through the dropped transport
    (AttributeError: 'NoneType' object has no attribute 'hostname'): "Unrecoverable error",
    and the worker exits instead of reconnecting once Redis is back."""
    close = kombu.Connection._do_close_self

    def _do_close_self(self: kombu.Connection) -> None:
        try:
            close(self)
        finally:
            self._default_channel = None

    kombu.Connection._do_close_self = _do_close_self  # type: ignore[method-assign]


_default_channel_forgotten_at_close()

logger = logging.getLogger("holdpoint.broker")

# After a publish fails, no hint is published by this process for this long: each would pay
# the failure again (a refused connection, or a timeout when the broker does not answer).
RETRY_BROKER_AFTER_S = 2.0
WARN_EVERY_S = 60.0

_broker_down_until = [0.0]
_last_warning = [0.0]


def publish_hint(task: Any, **options: Any) -> bool:
    """Publish `task` (`apply_async`, no retries) to have a worker do now what beat's sweep
    does anyway: whether it was published. Never raises: while the broker cannot be reached
    nothing is tried for RETRY_BROKER_AFTER_S after a failure, and a warning is logged at most
    once a minute per process. Only for work whose loss a sweep covers."""
    now = time.monotonic()
    if now < _broker_down_until[0]:
        return False
    try:
        task.apply_async(retry=False, **options)
    except Exception as error:
        _broker_down_until[0] = time.monotonic() + RETRY_BROKER_AFTER_S
        if _last_warning[0] == 0.0 or now - _last_warning[0] >= WARN_EVERY_S:
            _last_warning[0] = now
            logger.warning(
                "the broker cannot be reached (%s: %s); work is left to beat's sweeps until it answers",
                type(error).__name__,
                error,
            )
        return False
    return True
