"""A production process (DEBUG off) refuses to start without SECRET_KEY, with a message that says
what to set; a development one (DEBUG=true) falls back to a development key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.deploy.deployment import ROOT, base_environment, free_port


def without_secret_key(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = base_environment(f"sqlite:///{tmp_path / 'db.sqlite3'}", **extra)
    del env["SECRET_KEY"]
    return env


def test_manage_py_refuses_to_run_without_secret_key_when_debug_is_off(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=without_secret_key(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set" in done.stderr
    assert "DEBUG=true on a development machine" in done.stderr


def test_gunicorn_exits_instead_of_serving_without_secret_key(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{free_port()}"],
        cwd=ROOT,
        env=without_secret_key(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert "SECRET_KEY is not set" in done.stderr


def test_with_debug_on_a_development_key_is_used(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=without_secret_key(tmp_path, DEBUG="true"),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
