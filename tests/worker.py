"""A real Celery worker (with beat) in a child process, pointed at the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def test_database_url() -> str:
    conf = connection.settings_dict
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{conf['NAME']}"
    user = conf.get("USER") or "postgres"
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    host = conf.get("HOST") or "127.0.0.1"
    port = conf.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{conf['NAME']}"


class Worker:
    def __init__(
        self,
        *,
        sweep_seconds: float = 0.5,
        broker_url: str | None = None,
        beat: bool = True,
        queues: str | None = None,
        pool: str = "solo",
        env: dict[str, str] | None = None,
    ) -> None:
        """`queues`: the worker's -Q (None: the default, every queue); `env`: more settings."""
        self.sweep_seconds = sweep_seconds
        self.broker_url = broker_url or settings.CELERY_BROKER_URL
        self.beat = beat
        self.queues = queues
        self.pool = pool
        self.extra_env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.log = ROOT / "var" / f"test-worker-{os.getpid()}.log"

    def start(self) -> Worker:
        env = {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "CELERY_BROKER_URL": self.broker_url,
            "HOLDPOINT_SWEEP_SECONDS": str(self.sweep_seconds),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            **self.extra_env,
        }
        args = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", self.pool, "-l", "info"]
        if self.pool == "prefork":
            args += ["--concurrency", "2"]
        if self.queues:
            args += ["-Q", self.queues]
        if self.beat:
            args += ["--beat"]  # its schedule in memory (CELERY_BEAT_SCHEDULER)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        return self

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, no acknowledgement, as in a crash."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(predicate: Callable[[], bool], *, timeout: float = 30.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
