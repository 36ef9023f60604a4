"""A deployment as an operator makes one: a fresh database, `python manage.py …` and gunicorn in
their own processes, with only the environment they are given (nothing inherited from pytest's)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
from django.conf import settings
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent.parent


def fresh_database_url(tmp_path: Path) -> tuple[str, str | None]:
    """A database nobody has migrated, on the engine the suite runs on: (its URL, its PostgreSQL
    name or None for a SQLite file). PostgreSQL's is created here and dropped by drop_database."""
    conf = settings.DATABASES["default"]
    if conf["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{tmp_path / 'fresh.sqlite3'}", None
    name = f"hp_fresh_{uuid.uuid4().hex[:12]}"
    with admin_connection() as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    user = conf.get("USER") or "postgres"
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    host = conf.get("HOST") or "127.0.0.1"
    port = conf.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{name}", name


def drop_database(name: str | None) -> None:
    if name:
        with admin_connection() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def admin_connection() -> psycopg.Connection:
    conf = settings.DATABASES["default"]
    return psycopg.connect(
        dbname="postgres",
        user=conf.get("USER") or "postgres",
        password=conf.get("PASSWORD") or None,
        host=conf.get("HOST") or "127.0.0.1",
        port=conf.get("PORT") or 5432,
        autocommit=True,
    )


def base_environment(database_url: str, **extra: str) -> dict[str, str]:
    """What contract §8 says a deployment sets, and nothing else (no CACHE_URL)."""
    broker = settings.CELERY_BROKER_URL
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker,
        "SECRET_KEY": "a-deployment-secret-" + uuid.uuid4().hex,
        "ALLOWED_HOSTS": "127.0.0.1",
    }
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` in a fresh process; fails the test with its output on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# The README's production line: threaded workers, each on its own listening socket.
PRODUCTION_WORKERS = ("--worker-class", "gthread", "--threads", "4", "--reuse-port")


@contextmanager
def gunicorn(env: dict[str, str], *, workers: int = 1) -> Iterator[str]:
    """`gunicorn config.wsgi` as the README runs it in production, on a free port until the
    block ends; yields its base URL."""
    port = free_port()
    log = (ROOT / "var" / f"test-gunicorn-{os.getpid()}-{port}.log").open("w+b")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            *PRODUCTION_WORKERS,
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"gunicorn exited {process.returncode}:\n{read_log(log)}"
            assert time.monotonic() < deadline, f"gunicorn did not answer within 60 s:\n{read_log(log)}"
            try:
                httpx.get(f"{url}/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        log.close()
        Path(log.name).unlink(missing_ok=True)


def read_log(log) -> str:  # type: ignore[no-untyped-def]
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")[-5000:]
