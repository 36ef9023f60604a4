"""The Celery app configures cleanly in a fresh process: a web process that enqueues its first
task must not log an error, and the embedded filesystem broker's folders exist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFIGURE = """
import django
django.setup()
from config.celery import app
print(app.conf.broker_url)
print(app.conf.broker_transport_options.get("data_folder_in", ""))
"""


def test_configuring_the_app_logs_nothing_and_makes_the_broker_folders() -> None:
    env = {key: value for key, value in os.environ.items() if key != "CELERY_BROKER_URL"}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    done = subprocess.run(
        [sys.executable, "-c", CONFIGURE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    broker_url, queue_folder = done.stdout.split()
    assert broker_url == "filesystem://"
    assert done.stderr == ""  # no "Signal handler ... raised: RecursionError"
    assert Path(queue_folder).is_dir()
