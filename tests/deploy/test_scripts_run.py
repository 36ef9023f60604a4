"""scripts/run as a newcomer starts it: links point where it listens, and the console keeps the
banner (URL, password, API key) in view instead of scrolling it away under Celery's INFO lines."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.conftest import error_envelope
from tests.deploy.deployment import ROOT, free_port


def read_until(log: Path, pattern: str, process: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        assert process.poll() is None, f"scripts/run exited {process.returncode}:\n{text}"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} within {timeout} s:\n{log.read_text(errors='replace')}")


def test_scripts_run_links_to_the_bound_address_and_keeps_the_console_quiet(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "HOLDPOINT_BIND": f"127.0.0.1:{port}",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'run.sqlite3'}",
        # The worker's own broker, so that it takes no task of the suite's (worker and beat
        # share one process with --beat).
        "CELERY_BROKER_URL": "memory://",
    }
    for name in ("HOLDPOINT_BASE_URL", "HOLDPOINT_PASSWORD", "LOG_LEVEL", "DEBUG"):
        env.pop(name, None)
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "scripts/run"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        banner = read_until(log, r"Press Ctrl-C to stop", process, timeout=180)
        base = f"http://127.0.0.1:{port}"
        assert f"Holdpoint is running: {base}/" in banner
        assert f"Dashboard:  {base}/" in banner
        key = re.search(r"API key \(shown once\):\s*\n(hp_\S+)", banner).group(1)  # type: ignore[union-attr]

        answer = httpx.post(
            f"{base}/api/v1/envelopes",
            json=error_envelope(
                code="NEEDS_A_REVIEWER",
                next_action="request_approval",
                retry={"directive": "never", "max_attempts_remaining": 0},
                category="authorization",
            ),
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,  # the first requests of a fresh server on a busy machine
        )
        assert answer.status_code == 201, answer.text
        assert answer.json()["step"]["url"].startswith(f"{base}/steps/")
        assert httpx.get(f"{base}/accounts/login/", timeout=60).status_code == 200

        time.sleep(12)  # beat sends its sweeps every 5 s
        after = log.read_text(errors="replace")[len(banner) :]
        assert " INFO" not in after and "Sending due task" not in after, after
        assert '"POST /api/v1/envelopes' not in after  # no access log line per request
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    assert "==> stopped" in log.read_text(errors="replace")
    assert process.returncode == 0
