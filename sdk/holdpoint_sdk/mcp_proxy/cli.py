"""`holdpoint-mcp`: the command line of the recovery proxy.

    holdpoint-mcp --upstream "python my_server.py --flag" [--config holdpoint-mcp.toml]
    holdpoint-mcp --upstream-url https://tools.example/mcp
    holdpoint-mcp [options] -- python my_server.py --flag

Holdpoint is found through HOLDPOINT_URL and HOLDPOINT_API_KEY (or --url / --api-key-file FILE;
--api-key KEY works but warns: a command line is visible to every local user), the run id
through HOLDPOINT_RUN_ID (default: one per proxy process). The proxy makes itself non-dumpable
at start (Linux), so that the upstream it launches, running as the same user, cannot read the
key from /proc/$PPID/environ or /proc/$PPID/mem; the upstream's environment has no key. stdout is the MCP channel:
everything the proxy says goes to stderr (HOLDPOINT_MCP_LOG=info for more; HOLDPOINT_MCP_TIMINGS=1
for one line per guarded call with the milliseconds spent waiting for the attempt gate, the
upstream and the envelope, and in the proxy's own code).

With a reviewer token (--reviewer-token-file FILE or $HOLDPOINT_REVIEWER_TOKEN_FILE, never the
token itself; the file readable by its owner only) and its team (--reviewer-team or
$HOLDPOINT_REVIEWER_TEAM), a held call is put to the MCP client as an elicitation form when the
client declares the `elicitation` capability: accept approves as the token's user, decline
rejects (sdk/README.md, "Deciding in the client").
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import re
import shlex
import stat
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from .config import SEND_INPUT_CHOICES, ConfigError, ProxyConfig, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="holdpoint-mcp",
        description="A recovery proxy between an MCP client and an MCP server: every tools/call goes "
        "through Holdpoint's attempt gate and is reported as an envelope.",
    )
    upstream = parser.add_argument_group("the upstream MCP server (one of)")
    upstream.add_argument("--upstream", metavar="CMD", help='its command line, launched over stdio ("CMD ARGS...")')
    upstream.add_argument("--upstream-url", metavar="URL", help="its streamable HTTP endpoint")
    parser.add_argument("--config", metavar="FILE", help="tool policies (TOML when it ends in .toml, else JSON)")
    parser.add_argument("--url", help="Holdpoint's base URL (default: $HOLDPOINT_URL)")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--api-key-file", metavar="FILE", help="read the Holdpoint API key from FILE")
    keys.add_argument(
        "--api-key",
        metavar="KEY",
        help="a Holdpoint API key, hp_... (warns: every local user sees it in ps; "
        "prefer --api-key-file or $HOLDPOINT_API_KEY, the default)",
    )
    parser.add_argument("--run-id", help="groups this session's steps (default: $HOLDPOINT_RUN_ID, else a new one)")
    parser.add_argument("--hold-wait", type=float, metavar="SECONDS", help="wait for a reviewer's decision this long")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="an upstream call slower than this times out")
    parser.add_argument("--send-input", choices=SEND_INPUT_CHOICES, help="send the input with each attempt")
    parser.add_argument(
        "--report-success",
        choices=("before", "after"),
        help="after (the default): return a success at once and post its envelope in the background",
    )
    review = parser.add_argument_group("deciding in the client (MCP elicitation)")
    review.add_argument(
        "--reviewer-token-file",
        metavar="FILE",
        help="a reviewer token (hpr_...) to decide held calls in the client with "
        "(default: $HOLDPOINT_REVIEWER_TOKEN_FILE); never pass the token itself",
    )
    review.add_argument("--reviewer-team", metavar="TEAM", help="the token's team (default: $HOLDPOINT_REVIEWER_TEAM)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the upstream command line")
    return parser


ARGV_KEY_WARNING = (
    "holdpoint-mcp: warning: --api-key puts the key on the command line, where every local user can "
    "read it (ps, /proc/PID/cmdline); use --api-key-file FILE or the HOLDPOINT_API_KEY environment "
    "variable instead"
)
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
REVIEWER_TOKEN_PREFIX = "hpr_"
TEAM_SLUG = re.compile(r"[-a-zA-Z0-9_]{1,64}")  # accounts.models.TEAM_SLUG_RE


def refuse_dumps() -> bool:
    """Make this process non-dumpable (Linux; elsewhere a no-op, False): its /proc files
    (environ, mem, maps) then belong to root and no process without CAP_SYS_PTRACE may read
    them or attach, so the upstream it launches cannot read the key from /proc/$PPID/environ.
    execve resets the flag, so the upstream itself stays an ordinary process."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    if prctl is None or prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        reason = os.strerror(ctypes.get_errno()) if prctl is not None else "no prctl in libc"
        print(f"holdpoint-mcp: warning: could not make the process non-dumpable ({reason})", file=sys.stderr)
        return False
    return True


def _key_from_file(parser: argparse.ArgumentParser, path: str) -> str:
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f"--api-key-file: {path}: {getattr(error, 'strerror', None) or error}")
    if not key or len(key.split()) != 1:
        parser.error(f"--api-key-file: {path} must hold one key (hp_...), nothing else")
    return key


def _reviewer_token_from_file(parser: argparse.ArgumentParser, path: str) -> str:
    """The token a reviewer token file holds. A file other users may read is refused (as ssh
    refuses such a key; group read stays allowed for a mounted secret): the token approves
    writes. The token is never echoed in a message."""
    if path.startswith(REVIEWER_TOKEN_PREFIX):
        # The token itself where its file belongs (argparse takes --reviewer-token for this
        # option too): say so without repeating it.
        parser.error("--reviewer-token-file takes the path of a file holding the token, never the token itself")
    try:
        with open(path, encoding="utf-8") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            token = handle.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f"--reviewer-token-file: {path}: {getattr(error, 'strerror', None) or error}")
    if os.name == "posix" and mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP):
        parser.error(
            f"--reviewer-token-file: {path} may be read or written by any user (or written by its group); "
            f"restrict it (chmod 600 {shlex.quote(path)})"
        )
    if not token.startswith(REVIEWER_TOKEN_PREFIX) or len(token.split()) != 1:
        parser.error(f"--reviewer-token-file: {path} must hold one reviewer token (hpr_...), nothing else")
    return token


def _reviewer_settings(
    parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]
) -> dict[str, str]:
    path = args.reviewer_token_file or environ.get("HOLDPOINT_REVIEWER_TOKEN_FILE", "")
    team = args.reviewer_team or environ.get("HOLDPOINT_REVIEWER_TEAM", "")
    if not path and not team:
        return {}
    if not path:
        parser.error("--reviewer-team needs a reviewer token: --reviewer-token-file FILE")
    if not team:
        parser.error("a reviewer token needs its team: --reviewer-team TEAM or $HOLDPOINT_REVIEWER_TEAM")
    if TEAM_SLUG.fullmatch(team) is None:
        parser.error("--reviewer-team: a team slug (letters, digits, - and _; up to 64)")
    return {"reviewer_token": _reviewer_token_from_file(parser, path), "reviewer_team": team}


def config_from_args(argv: Sequence[str] | None, environ: Mapping[str, str]) -> ProxyConfig:
    """The proxy's settings from its command line, environment and config file; SystemExit
    (status 2, a message on stderr) when they cannot work."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.upstream:
        if command:
            parser.error("give the upstream either with --upstream or after --, not both")
        command = shlex.split(args.upstream)
    if bool(command) == bool(args.upstream_url):
        parser.error("name one upstream: --upstream CMD (or -- CMD ARGS...) or --upstream-url URL")
    url = args.url or environ.get("HOLDPOINT_URL", "")
    if args.api_key:
        print(ARGV_KEY_WARNING, file=sys.stderr)
    api_key = args.api_key or (_key_from_file(parser, args.api_key_file) if args.api_key_file else "")
    api_key = api_key or environ.get("HOLDPOINT_API_KEY", "")
    if not url:
        parser.error("Holdpoint's URL is needed: set HOLDPOINT_URL or pass --url")
    if not api_key:
        parser.error("a Holdpoint API key is needed: set HOLDPOINT_API_KEY or pass --api-key-file")
    run_id = args.run_id or environ.get("HOLDPOINT_RUN_ID") or f"mcp-{uuid.uuid4().hex[:12]}"
    if len(run_id) > 200 or not run_id.isprintable():
        parser.error("the run id is 1..200 printable characters")
    try:
        settings = load_settings(args.config) if args.config else {}
    except ConfigError as error:
        parser.error(f"--config: {error}")
    if args.hold_wait is not None:
        if args.hold_wait < 0:
            parser.error("--hold-wait: at least 0 seconds")
        settings["hold_wait_s"] = args.hold_wait
    if args.timeout is not None:
        if args.timeout <= 0:
            parser.error("--timeout: above 0 seconds")
        settings["call_timeout_s"] = args.timeout
    if args.send_input:
        settings["send_input"] = args.send_input
    if args.report_success:
        settings["report_success"] = args.report_success
    settings.update(_reviewer_settings(parser, args, environ))
    return ProxyConfig(
        url=url,
        api_key=api_key,
        run_id=run_id,
        upstream_command=tuple(command),
        upstream_url=args.upstream_url,
        **settings,
    )


def main(argv: Sequence[str] | None = None) -> int:
    refuse_dumps()  # first: the key is in this process's environment from its start
    config = config_from_args(argv, os.environ)
    level = os.environ.get("HOLDPOINT_MCP_LOG", "warning").upper()
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level, logging.WARNING),
        format="holdpoint-mcp %(levelname)s %(message)s",
    )
    if os.environ.get("HOLDPOINT_MCP_TIMINGS", "") not in ("", "0"):
        # Where each guarded call's time went, whatever the log level (bench/mcp_proxy_latency.py).
        timings = logging.getLogger("holdpoint_sdk.mcp_proxy.timing")
        timings.setLevel(logging.INFO)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("holdpoint-mcp %(message)s"))
        timings.addHandler(handler)
        timings.propagate = False
    import anyio

    from .server import serve

    try:
        anyio.run(serve, config)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
