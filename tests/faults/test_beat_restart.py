"""Beat killed with SIGKILL starts again cleanly and schedules: its schedule lives in memory
(celery.beat:Scheduler), so a kill leaves no file behind to be found corrupt."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.deploy.deployment import ROOT

pytestmark = pytest.mark.faults

SENT = re.compile(rb"Sending due task (\S+)")


def start_beat(cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """`celery -A config beat` in `cwd` (a default schedule file would be made there), on an
    in-process broker: what it sends is seen in its log, and reaches nobody else's queue."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SECRET_KEY": "beat-restart-test-" + "x" * 40,
        "CELERY_BROKER_URL": "memory://",
        "HOLDPOINT_SWEEP_SECONDS": "0.5",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "info"],
        cwd=cwd,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_sends(log: Path, count: int, timeout: float = 60) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sent = SENT.findall(log.read_bytes())
        if len(sent) >= count:
            return sent
        time.sleep(0.1)
    raise AssertionError(f"beat sent fewer than {count} tasks in {timeout} s:\n{log.read_text(errors='replace')}")


def test_beat_killed_starts_again_without_a_traceback_and_schedules(tmp_path: Path) -> None:
    began = time.time()
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    beat = start_beat(cwd, first_log)
    try:
        wait_for_sends(first_log, 6)
    finally:
        os.killpg(beat.pid, signal.SIGKILL)  # mid-schedule, as a crash or the OOM killer would
        beat.wait(timeout=10)

    again = start_beat(cwd, second_log)
    try:
        sent = wait_for_sends(second_log, 10)
    finally:
        os.killpg(again.pid, signal.SIGTERM)
        again.wait(timeout=20)

    for log in (first_log, second_log):
        text = log.read_text(errors="replace")
        assert "Traceback" not in text and "ERROR" not in text, text
    # No schedule file: neither where beat runs nor where the settings once put it (var/).
    assert list(cwd.iterdir()) == []
    written = [p for p in (ROOT / "var").glob("celerybeat-schedule*") if p.stat().st_mtime >= began]
    assert written == []
    assert {b"sweep-due-steps", b"deliver-webhooks", b"notify-reviewers"} <= set(sent)
    assert sent.count(b"sweep-due-steps") >= 3  # and it goes on scheduling
