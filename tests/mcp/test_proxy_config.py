"""The proxy's command line and config file: what a user gets wrong is refused with a message
naming it, before any process is launched (the command is run as users run it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from holdpoint_sdk.mcp_proxy import ConfigError, ToolPolicy, load_settings, parse_settings
from holdpoint_sdk.mcp_proxy.answers import describe
from holdpoint_sdk.mcp_proxy.cli import config_from_args
from holdpoint_sdk.mcp_proxy.reports import looks_like_envelope
from holdpoint_sdk.mcp_proxy.server import upstream_environment

ENV = {"HOLDPOINT_URL": "http://127.0.0.1:8000", "HOLDPOINT_API_KEY": "hp_test"}


def holdpoint_mcp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "holdpoint_sdk.mcp_proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


def test_the_command_refuses_to_start_without_holdpoint_or_an_upstream() -> None:
    no_key = holdpoint_mcp("--upstream", "python server.py", env={"HOLDPOINT_URL": "http://127.0.0.1:8000"})
    assert no_key.returncode == 2
    assert "HOLDPOINT_API_KEY" in no_key.stderr and no_key.stdout == ""  # stdout is the MCP channel
    no_upstream = holdpoint_mcp(env=ENV)
    assert no_upstream.returncode == 2 and "--upstream" in no_upstream.stderr


def test_a_config_typo_is_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text('read_only = ["get_invoice"]\n[tools.create_invoice]\nverfication_tool = "find_invoice"\n')
    started = holdpoint_mcp("--config", str(config), "--upstream", "python server.py", env=ENV)
    assert started.returncode == 2
    assert "tools.create_invoice: unknown key(s) verfication_tool" in started.stderr


def test_the_upstream_comes_from_upstream_or_after_a_double_dash_and_settings_from_file_and_flags(
    tmp_path: Path,
) -> None:
    config = tmp_path / "proxy.json"
    config.write_text(
        json.dumps(
            {
                "hold_wait_s": 120,
                "read_only": ["search"],
                "tools": {"create_invoice": {"verification_tool": "find_invoice", "timeout_s": 5}},
            }
        )
    )
    quoted = config_from_args(["--upstream", "node 'my server.js' --port 1", "--config", str(config)], ENV)
    assert quoted.upstream_command == ("node", "my server.js", "--port", "1")
    assert quoted.policy("search") == ToolPolicy(guarded=False)
    assert quoted.policy("create_invoice").verification_tool == "find_invoice"
    assert (quoted.call_timeout("create_invoice"), quoted.call_timeout("other")) == (5.0, 60.0)
    assert quoted.hold_wait("create_invoice") == 120.0
    dashed = config_from_args(["--hold-wait", "3", "--run-id", "run-7", "--", "python", "-m", "srv"], ENV)
    assert (dashed.upstream_command, dashed.hold_wait_s, dashed.run_id) == (("python", "-m", "srv"), 3.0, "run-7")
    remote = config_from_args(["--upstream-url", "https://tools.example/mcp"], {**ENV, "HOLDPOINT_RUN_ID": "r1"})
    assert (remote.upstream_url, remote.upstream_command, remote.run_id) == ("https://tools.example/mcp", (), "r1")
    # Without HOLDPOINT_RUN_ID each proxy process is its own run.
    assert config_from_args(["--", "srv"], ENV).run_id != config_from_args(["--", "srv"], ENV).run_id


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"hold_wait": 3}, "config: unknown key(s) hold_wait"),
        ({"hold_wait_s": -1}, "hold_wait_s: must be at least 0"),
        ({"call_timeout_s": 0}, "call_timeout_s: must be above 0"),
        ({"call_timeout_s": True}, "call_timeout_s: a number of seconds"),
        ({"send_input": "sometimes"}, "send_input: one of auto, always, never"),
        ({"read_only": "get_invoice"}, "read_only: a list of tool names"),
        ({"tools": {"t": {"side_effects": "no"}}}, "tools.t.side_effects: true or false"),
        ({"read_only": ["t"], "tools": {"t": {}}}, "tools.t: also listed in read_only"),
    ],
)
def test_settings_that_cannot_work_are_refused(given: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_settings(given)


def test_an_unreadable_config_file_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "proxy.toml"
    broken.write_text("hold_wait_s = ")
    with pytest.raises(ConfigError, match=r"proxy\.toml"):
        load_settings(broken)
    with pytest.raises(ConfigError, match=r"missing\.json"):
        load_settings(tmp_path / "missing.json")


def test_the_upstream_never_sees_holdpoints_api_key() -> None:
    env = upstream_environment({"HOLDPOINT_API_KEY": "hp_secret", "HOLDPOINT_URL": "u", "PATH": "/bin"})
    assert env == {"HOLDPOINT_URL": "u", "PATH": "/bin"}


def test_what_the_model_reads_comes_from_the_directive() -> None:
    step = {"url": "https://hp.example/steps/4/", "state": "awaiting_approval", "last_envelope": None}
    hold = {"action": "hold", "may_write": False, "not_before": None, "reason": "approval_pending"}
    assert describe(hold, step, "r/1") == (
        "Holdpoint: held for a reviewer at https://hp.example/steps/4/; do not call again until it is decided "
        "(approval_pending)."
    )
    wait = {"action": "wait", "may_write": False, "not_before": "2026-12-01T10:00:00Z", "reason": "retry_not_before"}
    assert "wait until 2026-12-01T10:00:00Z" in describe(wait, None, "r/1")


def test_only_a_structured_result_shaped_like_an_envelope_goes_as_the_mcp_dialect() -> None:
    assert looks_like_envelope({"ok": False, "code": "RATE_LIMITED", "commit_state": "not_committed"})
    assert looks_like_envelope({"ok": True, "commit_state": "committed"})
    assert not looks_like_envelope({"ok": True, "invoice_id": "inv_1"})  # a plain result with an `ok` flag
    assert not looks_like_envelope({"invoice_id": "inv_1"})
    assert not looks_like_envelope([{"ok": False}])


def test_the_holdpoint_mcp_console_script_is_installed_with_the_sdk() -> None:
    script = Path(sys.executable).parent / "holdpoint-mcp"
    helped = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0
    assert "--upstream CMD" in helped.stdout and "--upstream-url URL" in helped.stdout
