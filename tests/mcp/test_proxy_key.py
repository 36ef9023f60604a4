"""Holdpoint's API key in `holdpoint-mcp` (issue 23 point 7): the upstream it launches cannot read
it from the proxy's /proc files, and a key on the command line warns. Each test runs the real
command in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from envelopes.models import Step
from tests.mcp.conftest import ROOT, UPSTREAM, Rig
from tests.mcp.test_proxy_e2e import holdpoint

KEY = "hp_probe_0123456789abcdef"
PROBE = "parent-probe: "


def _as_this_user_without_privilege(argv: list[str]) -> list[str]:
    """`argv` as an ordinary process of this user. Root reads every process's /proc files, a
    non-dumpable one's too, with its capabilities; so as root the command runs as uid 0 with
    none (setpriv): the same user as the upstream, without CAP_SYS_PTRACE, as a real deployment
    runs the proxy and its upstream."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", *argv]


def _probe(argv: list[str], tmp_path: Path, **env: str) -> tuple[dict[str, Any], int]:
    """Start `argv`, which launches tests/mcp/upstream_server.py with UPSTREAM_PROBE_PARENT=1;
    (what the upstream found in its parent's /proc files, the parent's pid)."""
    errlog = tmp_path / f"stderr-{time.monotonic_ns()}.log"
    environ = {
        **os.environ,
        "HOLDPOINT_URL": "http://127.0.0.1:9",  # never asked: no tools/call is made
        "HOLDPOINT_API_KEY": KEY,
        "UPSTREAM_PROBE_PARENT": "1",
        "UPSTREAM_STATE": str(tmp_path / "upstream.json"),
        "PYTHONPATH": str(ROOT),
        **env,
    }
    with errlog.open("w") as err:
        process = subprocess.Popen(
            _as_this_user_without_privilege(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=environ,
            cwd=str(ROOT),
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = [line for line in errlog.read_text().splitlines() if line.startswith(PROBE)]
            if lines:
                return json.loads(lines[0].removeprefix(PROBE)), process.pid
            assert process.poll() is None, errlog.read_text()
            time.sleep(0.05)
        raise AssertionError(f"the upstream never reported its probe: {errlog.read_text()}")
    finally:
        assert process.stdin is not None
        process.stdin.close()  # the proxy ends when its client goes, and stops the upstream
        process.wait(timeout=30)


@pytest.mark.skipif(sys.platform != "linux", reason="/proc and prctl(PR_SET_DUMPABLE) are Linux's")
def test_the_upstream_cannot_read_the_key_from_the_proxys_proc_environ_or_mem(tmp_path: Path) -> None:
    """This fails when the proxy stays dumpable (its upstream, the same user, then reads
    HOLDPOINT_API_KEY from /proc/$PPID/environ), and also when this machine cannot show such a
    leak at all: the control, an ordinary parent under the same privileges, must leak, so that
    a kernel hiding /proc (hidepid, a hardened LSM) fails the test instead of passing it
    vacuously."""
    upstream = [sys.executable, str(UPSTREAM)]
    control, control_pid = _probe(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *upstream], tmp_path
    )
    assert control == {"parent": control_pid, "environ": "key found", "mem": control["mem"]}

    found, proxy_pid = _probe(
        [sys.executable, "-m", "holdpoint_sdk.mcp_proxy", "--upstream", " ".join(upstream)], tmp_path
    )

    assert found["parent"] == proxy_pid
    assert found["environ"].startswith("denied"), found
    assert found["mem"].startswith("denied"), found


def holdpoint_mcp(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The command with an upstream and a client that leaves at once (stdin at its end)."""
    return subprocess.run(
        [sys.executable, "-m", "holdpoint_sdk.mcp_proxy", *args, "--upstream", f"{sys.executable} {UPSTREAM}"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
        env={
            "PATH": "/usr/bin:/bin",
            "HOLDPOINT_URL": "http://127.0.0.1:9",
            "UPSTREAM_STATE": str(tmp_path / "upstream.json"),
            **env,
        },
    )


def test_a_key_on_the_command_line_warns_and_names_the_safer_ways(tmp_path: Path) -> None:
    warned = holdpoint_mcp("--api-key", KEY, tmp_path=tmp_path)
    quiet = holdpoint_mcp(tmp_path=tmp_path, HOLDPOINT_API_KEY=KEY)

    assert warned.returncode == 0 and quiet.returncode == 0, (warned.stderr, quiet.stderr)
    assert "warning: --api-key puts the key on the command line, where every local user can read it" in warned.stderr
    assert "use --api-key-file FILE or the HOLDPOINT_API_KEY environment variable instead" in warned.stderr
    assert KEY not in warned.stderr and warned.stdout == ""  # stdout is the MCP channel
    assert "warning" not in quiet.stderr


def test_a_key_file_that_is_missing_empty_or_given_with_a_key_is_refused(tmp_path: Path) -> None:
    missing = holdpoint_mcp("--api-key-file", str(tmp_path / "nope"), tmp_path=tmp_path)
    (tmp_path / "empty").write_text("\n")
    empty = holdpoint_mcp("--api-key-file", str(tmp_path / "empty"), tmp_path=tmp_path, HOLDPOINT_API_KEY=KEY)
    (tmp_path / "key").write_text(KEY + "\n")
    both = holdpoint_mcp("--api-key-file", str(tmp_path / "key"), "--api-key", KEY, tmp_path=tmp_path)

    assert missing.returncode == 2 and "--api-key-file: " in missing.stderr and "No such file" in missing.stderr
    assert empty.returncode == 2 and "must hold one key" in empty.stderr  # never falls back silently
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


@pytest.mark.django_db(transaction=True)
def test_the_key_from_a_file_is_the_one_the_proxy_uses(rig: Rig, tmp_path: Path) -> None:
    key_file = tmp_path / "holdpoint.key"
    key_file.write_text(rig.api_key + "\n")
    key_file.chmod(0o600)

    async def main() -> Any:
        async with rig.session("--api-key-file", str(key_file), HOLDPOINT_API_KEY="") as session:
            return await session.call_tool("create_invoice", {"customer": "cus_f", "amount": 5})

    created = anyio.run(main)

    assert not created.is_error and created.structured_content["invoice_id"] == "inv_1"
    assert Step.objects.get(team=rig.team, operation_ref=holdpoint(created)["operation_ref"]).state == "succeeded"
