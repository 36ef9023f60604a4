"""The proxy's settings: where Holdpoint and the upstream server are, and a policy per tool.

A config file (`--config FILE`, TOML when it ends in `.toml`, else JSON) looks like:

    hold_wait_s = 300          # wait this long for a reviewer before answering "held" (0: answer at once)
    call_timeout_s = 30        # an upstream call slower than this is a timeout (unknown on a write)
    send_input = "auto"        # the call's input goes with each attempt, for the reviewer to read;
                               # auto: one the gate will not take (over 32 KiB, refused) goes as its
                               # fingerprint alone; always: the call fails instead; never: fingerprints
    read_only = ["get_invoice", "search_customers"]   # pass straight through, no Holdpoint
    report_success = "after"   # a success is returned at once, its envelope posted in the
                               # background (its directive is always stop); "before": wait for it
    elicit_timeout_s = 600     # with a reviewer token: how long a held call's form waits in the
                               # client for an answer (then the hold is answered as without one)

    [tools.create_invoice]
    side_effects = true        # false: a timeout or an error cannot have written anything
    verification_tool = "find_invoice"   # called with {"operation_ref": ...} when the outcome is unknown
    hold_wait_s = 600
    timeout_s = 10

Unknown keys are refused (`ConfigError` names them): a typo must not silently unguard a tool.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..background import REPORT_SUCCESS_MODES, ReportSuccess

SendInput = Literal["auto", "always", "never"]
SEND_INPUT_CHOICES: tuple[SendInput, ...] = ("auto", "always", "never")
_TOP_KEYS = frozenset(
    {"hold_wait_s", "call_timeout_s", "send_input", "read_only", "tools", "report_success", "elicit_timeout_s"}
)
_TOOL_KEYS = frozenset({"guarded", "side_effects", "verification_tool", "hold_wait_s", "timeout_s"})


class ConfigError(ValueError):
    """A config file or option the proxy cannot use; the message names the key."""


@dataclass(frozen=True)
class ToolPolicy:
    """How the proxy treats one tool of the upstream server."""

    guarded: bool = True  # False: read-only, passed straight through without Holdpoint
    side_effects: bool = True
    verification_tool: str | None = None
    hold_wait_s: float | None = None  # None: the proxy-wide hold_wait_s
    timeout_s: float | None = None  # None: the proxy-wide call_timeout_s


@dataclass(frozen=True)
class ProxyConfig:
    url: str
    api_key: str
    run_id: str
    upstream_command: tuple[str, ...] = ()
    upstream_url: str | None = None
    hold_wait_s: float = 0.0
    call_timeout_s: float = 60.0
    send_input: SendInput = "auto"
    tools: Mapping[str, ToolPolicy] = field(default_factory=dict)
    report_success: ReportSuccess = "after"  # issue 29: successes reported in the background
    # Deciding in the client (MCP elicitation): a reviewer token (`hpr_...`, read from a file,
    # never an argument) and the team whose reviewer API it decides through.
    reviewer_token: str | None = field(default=None, repr=False)
    reviewer_team: str | None = None
    elicit_timeout_s: float = 600.0

    def policy(self, tool: str) -> ToolPolicy:
        return self.tools.get(tool) or ToolPolicy()

    def hold_wait(self, tool: str) -> float:
        wait = self.policy(tool).hold_wait_s
        return self.hold_wait_s if wait is None else wait

    def call_timeout(self, tool: str) -> float:
        timeout = self.policy(tool).timeout_s
        return self.call_timeout_s if timeout is None else timeout


def _seconds(value: Any, key: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{key}: a number of seconds is expected, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{key}: must be {'above' if positive else 'at least'} 0, got {value!r}")
    return float(value)


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: true or false is expected, got {value!r}")
    return value


def _tool_name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 128:
        raise ConfigError(f"{key}: a tool name is expected, got {value!r}")
    return value


def _unknown(keys: Any, allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")


def parse_settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ProxyConfig that a config file may set, checked."""
    if not isinstance(data, Mapping):
        raise ConfigError("the config file must hold an object (a table)")
    _unknown(data, _TOP_KEYS, "config")
    out: dict[str, Any] = {}
    if "hold_wait_s" in data:
        out["hold_wait_s"] = _seconds(data["hold_wait_s"], "hold_wait_s")
    if "call_timeout_s" in data:
        out["call_timeout_s"] = _seconds(data["call_timeout_s"], "call_timeout_s", positive=True)
    if "send_input" in data:
        if data["send_input"] not in SEND_INPUT_CHOICES:
            raise ConfigError(f"send_input: one of {', '.join(SEND_INPUT_CHOICES)}, got {data['send_input']!r}")
        out["send_input"] = data["send_input"]
    if "elicit_timeout_s" in data:
        out["elicit_timeout_s"] = _seconds(data["elicit_timeout_s"], "elicit_timeout_s", positive=True)
    if "report_success" in data:
        if data["report_success"] not in REPORT_SUCCESS_MODES:
            raise ConfigError(f"report_success: before or after, got {data['report_success']!r}")
        out["report_success"] = data["report_success"]
    tools: dict[str, ToolPolicy] = {}
    read_only = data.get("read_only", [])
    if not isinstance(read_only, list):
        raise ConfigError("read_only: a list of tool names is expected")
    for index, name in enumerate(read_only):
        tools[_tool_name(name, f"read_only[{index}]")] = ToolPolicy(guarded=False)
    table = data.get("tools", {})
    if not isinstance(table, Mapping):
        raise ConfigError("tools: a table of tool name -> settings is expected")
    for name, settings in table.items():
        where = f"tools.{name}"
        _tool_name(name, where)
        if not isinstance(settings, Mapping):
            raise ConfigError(f"{where}: a table of settings is expected")
        _unknown(settings, _TOOL_KEYS, where)
        if name in tools:
            raise ConfigError(f"{where}: also listed in read_only")
        verification_tool = settings.get("verification_tool")
        tools[name] = ToolPolicy(
            guarded=_bool(settings.get("guarded", True), f"{where}.guarded"),
            side_effects=_bool(settings.get("side_effects", True), f"{where}.side_effects"),
            verification_tool=None
            if verification_tool is None
            else _tool_name(verification_tool, f"{where}.verification_tool"),
            hold_wait_s=None
            if settings.get("hold_wait_s") is None
            else _seconds(settings["hold_wait_s"], f"{where}.hold_wait_s"),
            timeout_s=None
            if settings.get("timeout_s") is None
            else _seconds(settings["timeout_s"], f"{where}.timeout_s", positive=True),
        )
    out["tools"] = tools
    return out


def load_settings(path: str | Path) -> dict[str, Any]:
    """Read and check a config file (TOML when its name ends in .toml, else JSON)."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{source}: {error.strerror or error}") from error
    try:
        data = tomllib.loads(text) if source.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{source}: {error}") from error
    return parse_settings(data)
