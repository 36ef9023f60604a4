"""Under pytest-xdist each worker gets Redis databases of its own for the broker and the cache, so
a Celery worker one test starts never takes another test's tasks and cache keys (team ids repeat
between the workers' databases) never collide. Loaded with `-p` from pytest's addopts, before
pytest-django reads the settings; the worker's own processes inherit the environment.

Resources a test file fixes for itself (a Redis database, a port, a RabbitMQ vhost) stay safe
because scripts/test distributes whole files (`--dist loadfile`)."""

from __future__ import annotations

import os
import re

_SPREAD = 2  # gw1 takes broker 2 and cache 3 from CI's 0 and 1; files fix 7 and up for themselves


def _isolate(worker: str) -> None:
    number = int(worker.removeprefix("gw") or 0)
    if number == 0:
        return
    urls = {"CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", ""), "CACHE_URL": os.environ.get("CACHE_URL", "")}
    for name, url in urls.items():
        found = re.fullmatch(r"(redis://[^/]+)/(\d+)", url)
        if found:
            os.environ[name] = f"{found[1]}/{int(found[2]) + _SPREAD * number}"


_isolate(os.environ.get("PYTEST_XDIST_WORKER", ""))
