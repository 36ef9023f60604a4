"""A production process (DEBUG off) refuses to start without SECRET_KEY or with one shorter than 50
characters, with a message that says what to set; a development one (DEBUG=true) falls back to a
development key."""

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


def check_with_secret_key(tmp_path: Path, key: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**without_secret_key(tmp_path, **extra), "SECRET_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_manage_py_refuses_a_secret_key_shorter_than_50_characters(tmp_path: Path) -> None:
    key = "k" * 19 + "-short-key-0123456789abcdefghi"  # 49 characters
    done = check_with_secret_key(tmp_path, key)

    assert done.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is 49 characters long, shorter than 50." in done.stderr
    assert "secrets.token_urlsafe(50)" in done.stderr
    assert key not in done.stderr  # the message names the length, never the key


def test_gunicorn_exits_instead_of_serving_with_a_short_secret_key(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{free_port()}"],
        cwd=ROOT,
        env={**without_secret_key(tmp_path), "SECRET_KEY": "holdpoint-demo-secret"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert "SECRET_KEY is 21 characters long" in done.stderr


def test_a_secret_key_of_50_characters_is_accepted(tmp_path: Path) -> None:
    done = check_with_secret_key(tmp_path, "0123456789" * 5)

    assert done.returncode == 0, done.stderr


def test_with_debug_on_a_short_secret_key_is_accepted(tmp_path: Path) -> None:
    done = check_with_secret_key(tmp_path, "dev", DEBUG="true")

    assert done.returncode == 0, done.stderr
