"""Celery app: `celery -A config worker --beat` runs the worker and its timers."""

import os
from pathlib import Path

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("holdpoint")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _create_filesystem_broker_folders(sender: Celery, **kwargs: object) -> None:
    """Kombu's filesystem broker (the embedded default) does not create its folders. (Not on
    `on_configure`: reading `sender.conf` while the configuration loads loads it again, and the
    recursion is logged as an error by every process that configures the app.)"""
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)
