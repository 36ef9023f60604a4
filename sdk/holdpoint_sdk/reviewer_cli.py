"""`holdpoint`: decide on held steps from a terminal, over the reviewer API (contract §10).

    export HOLDPOINT_URL=https://holdpoint.example HOLDPOINT_TOKEN=hpr_...
    holdpoint queue payments [--kind approvals|verifications|escalations]
    holdpoint show payments run_81/step_4
    holdpoint approve payments run_81/step_4 --etag '"41.7"' --reason "ok" [--input edited.json]
    holdpoint approve payments run_81/step_4 --grant-scope key [--grant-when CEL] [--grant-expires-in 3600]
    holdpoint reject|cancel payments run_81/step_4 --reason "..."
    holdpoint mark-committed|permit-retry payments run_81/step_4 --reason "..."
    holdpoint rules pull payments > rules.yaml; holdpoint rules test|push payments rules.yaml
    holdpoint audit verify export.jsonl [--jwks URL|FILE]   (offline: no server, no token)

`--json` prints Holdpoint's answer as JSON (an error as {"error": {...}}). Everything an agent
wrote (refs, codes, details, the input) is printed with control and format characters escaped,
so agent text cannot move the cursor, recolour the terminal or reorder a line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast

import httpx

from . import rules_cli
from .audit_verify import verify_main
from .envelopes import input_fingerprint, now_utc, parse_rfc3339
from .errors import HoldpointError
from .reviewer import Reviewer
from .types import DecisionAction, QueueKind, Step

DEFAULT_URL = "http://127.0.0.1:8000"
QUEUE_KINDS = ("approvals", "verifications", "escalations")
GRANT_SCOPES = ("run", "key", "team")
# Subcommand -> the decision's action.
DECISIONS: dict[str, DecisionAction] = {
    "approve": "approve",
    "reject": "reject",
    "cancel": "cancel",
    "mark-committed": "mark_committed",
    "permit-retry": "permit_retry",
}

# What a reviewer may do in each held state (contract §3).
COMMANDS_BY_STATE = {
    "awaiting_approval": ("approve", "reject"),
    "verifying": ("mark-committed", "permit-retry", "cancel"),
    "escalated": ("mark-committed", "permit-retry", "cancel"),
}

# Exit codes: one per kind of answer a script may want to tell apart.
EXIT_OK = 0
EXIT_ERROR = 1  # any other error from Holdpoint (5xx, unexpected)
EXIT_USAGE = 2  # bad arguments, no token, an --input file that is not a JSON object
EXIT_UNAUTHORIZED = 3  # 401: the token is missing, unknown, expired or revoked
EXIT_FORBIDDEN = 4  # 403: a viewer deciding, or an agent key
EXIT_NOT_FOUND = 5  # 404: no such team or step for this token's user
EXIT_NOT_ALLOWED = 6  # 409: the step's state does not allow this decision
EXIT_CHANGED = 7  # 412: the step changed since the ETag (someone else decided, the agent moved)
EXIT_PRECONDITION = 8  # 428: no If-Match
EXIT_INVALID = 9  # 400/422: the request broke a rule (a reason missing, an input refused)
EXIT_THROTTLED = 10  # 429
EXIT_UNREACHABLE = 11  # no answer from Holdpoint

_BY_STATUS = {
    401: EXIT_UNAUTHORIZED,
    403: EXIT_FORBIDDEN,
    404: EXIT_NOT_FOUND,
    409: EXIT_NOT_ALLOWED,
    412: EXIT_CHANGED,
    428: EXIT_PRECONDITION,
    400: EXIT_INVALID,
    413: EXIT_INVALID,
    422: EXIT_INVALID,
    429: EXIT_THROTTLED,
}


class UsageError(Exception):
    pass


def safe(value: Any) -> str:
    """Untrusted text made harmless for a terminal: control characters (ESC, CR, C1), format
    characters (bidi overrides, zero-width) and line separators become visible escapes."""
    text = value if isinstance(value, str) else str(value)
    out = []
    for char in text:
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def _fold(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _age(when: str | None, now: dt.datetime) -> str:
    moment = parse_rfc3339(when) if when else None
    if moment is None:
        return "-"
    seconds = max(int((now - moment).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def input_summary(step: Mapping[str, Any], width: int = 48) -> str:
    """One line for the queue: the proposed input's top-level keys and values, or why there is none."""
    proposal = step.get("proposal")
    if not isinstance(proposal, Mapping):
        return "(no input sent)"
    value = proposal.get("input")
    if not isinstance(value, Mapping):
        return "(input withheld)" if proposal.get("input_redacted") else "(no input sent)"
    parts = [f"{key}={json.dumps(item, ensure_ascii=False)}" for key, item in value.items()]
    return _fold(safe(" ".join(parts)), width)


def table(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
             for line in (headers, *rows)]  # fmt: skip
    return "\n".join(lines)


def render_queue(steps: Sequence[Step], *, now: dt.datetime) -> str:
    if not steps:
        return "nothing waiting"
    rows = [
        (
            _fold(safe(step["operation_ref"]), 40),
            safe(step["tool"]),
            safe(step["state"]) + (f" for {safe(step['approver_group'])}" if step.get("approver_group") else ""),
            safe(step["reason"]),
            f"{step['attempts']}/{step['max_attempts']}",
            _age(step.get("updated_at"), now),
            input_summary(step),
        )
        for step in steps
    ]
    return table(rows, ("OPERATION_REF", "TOOL", "STATE", "REASON", "ATTEMPTS", "WAITING", "INPUT"))


def render_step(team: str, step: Step, etag: str) -> str:
    lines = [f"{safe(step['tool'])}  {safe(step['operation_ref'])}  {step['state']} ({safe(step['reason'])})"]

    def field(name: str, value: Any) -> None:
        lines.append(f"  {name:<12} {value}")

    field("page", safe(step.get("url") or "-"))
    field("etag", safe(etag))
    field("attempts", f"{step['attempts']} of {step['max_attempts']}")
    if step.get("approver_group") or (step.get("approvals_required") or 1) > 1:
        # Who decides (contract §12): only the group's members may approve or reject.
        group = f", for {safe(step['approver_group'])}" if step.get("approver_group") else ""
        field("approvals", f"{step.get('approvals_required') or 1} needed{group}")
    if step.get("run_id") or step.get("correlation_id"):
        field("run", f"{safe(step.get('run_id') or '-')}  correlation {safe(step.get('correlation_id') or '-')}")
    for name in ("not_before", "deadline"):
        if step.get(name):
            field(name.replace("_", " "), safe(step[name]))
    envelope = step.get("last_envelope")
    if envelope:
        what = "ok" if envelope["ok"] else safe(envelope.get("code") or "error")
        how = ", ".join(safe(envelope[k]) for k in ("category", "commit_state", "next_action") if envelope.get(k))
        field("last result", f"{what} ({how}) at {safe(envelope.get('occurred_at') or '-')}")
        for key, value in (envelope.get("safe_details") or {}).items():
            field("", f"{safe(key)}: {safe(json.dumps(value, ensure_ascii=False))}")
    proposal = step.get("proposal")
    if isinstance(proposal, Mapping):
        marks = " (redacted values marked [REDACTED:...])" if proposal.get("input_redacted") else ""
        field("proposed", f"attempt {proposal.get('attempt')}  sha256 {safe(proposal.get('input_fingerprint'))}{marks}")
        if isinstance(proposal.get("input"), Mapping):
            pretty = json.dumps(proposal["input"], ensure_ascii=False, indent=2, sort_keys=True)
            lines.extend("    " + safe(line) for line in pretty.splitlines())
    else:
        field("proposed", "the agent sent no input (only its fingerprint)")
    directive = step["directive"]
    if directive.get("input") is not None:
        field("approved", f"edited input, sha256 {safe(directive.get('input_fingerprint'))}")
    for decision in step.get("decisions") or []:
        edited = " [edited input]" if decision.get("edited") else ""
        reason = f": {safe(decision['reason'])}" if decision.get("reason") else ""
        field(
            "decision",
            f"{decision['action']} by {safe(decision['reviewer'])} at {decision['decided_at']}{edited}{reason}",
        )
    commands = COMMANDS_BY_STATE.get(step["state"])
    if commands:
        command = shlex.join(["holdpoint", "COMMAND", team, step["operation_ref"], "--etag", etag, "--reason", "..."])
        lines.append(f"decide ({' | '.join(commands)}): " + safe(command))
    return "\n".join(lines)


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: with a key twice, json.loads would silently keep
    the last value, and the reviewer might approve a value they did not mean (the step page
    refuses such an edit too)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(safe(key))
            seen.add(key)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: Holdpoint would refuse the body


def read_input(path: str, stdin: IO[str]) -> dict[str, Any]:
    """An edited input from a file (or `-`, stdin): a JSON object, or a UsageError."""
    try:
        text = stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}") from error
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except _DuplicateKey as duplicate:
        raise UsageError(f"{path} names {duplicate.key!r} twice in one object: say which value you approve") from None
    except ValueError as error:
        raise UsageError(f"{path} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise UsageError(f"{path} holds a JSON {type(value).__name__}: an input is a JSON object")
    return value


def explain(error: HoldpointError, *, team: str, ref: str | None) -> str:
    """What went wrong, in the reviewer's terms."""
    detail = safe(error.detail)
    where = f"{safe(ref)} in team {safe(team)}" if ref else f"team {safe(team)}"
    if error.status is None:
        return f"no answer from Holdpoint: {detail}"
    if error.status == 401:
        return f"Holdpoint refused the token (missing, unknown, expired or revoked): check HOLDPOINT_TOKEN ({detail})"
    if error.status == 403:
        return f"not allowed: {detail}"
    if error.status == 404:
        return f"not found: no {where} for this token's user ({detail})"
    if error.status == 409:
        return f"the step's state does not allow this decision: {detail}"
    if error.status == 412 and error.code == "rules_changed":
        return "the rules changed since you read them: pull again and redo your change"
    if error.status == 412:
        return "the step changed since you looked: run show again"
    if error.status == 428:
        return "Holdpoint needs the step's ETag (If-Match): run show, then pass --etag"
    if error.status in (400, 413, 422):
        fields = "; ".join(
            f"{safe(e.get('field'))}"
            + (f" (rule {safe(e['name'])})" if e.get("name") else "")
            + (f" at position {safe(e['position'])}" if e.get("position") is not None else "")
            + f": {safe(e.get('reason') or e.get('rule') or e.get('message') or '')}"
            for e in error.errors
        )
        return f"refused: {detail}" + (f" ({fields})" if fields else "")
    if error.status == 429:
        wait = f"; retry in {error.retry_after:.0f}s" if error.retry_after else ""
        return f"too many requests{wait}"
    return f"Holdpoint answered {error.status}: {detail}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="holdpoint",
        description="Decide on held steps over Holdpoint's reviewer API. "
        f"HOLDPOINT_URL is the server (default {DEFAULT_URL}); HOLDPOINT_TOKEN your reviewer token "
        "(hpr_..., from /account/tokens/).",
    )
    parser.add_argument("--url", help="the server (default: $HOLDPOINT_URL)")
    parser.add_argument("--json", action="store_true", help="print Holdpoint's answer as JSON")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    queue = commands.add_parser("queue", help="a team's steps waiting for a reviewer")
    queue.add_argument("team")
    queue.add_argument("--kind", choices=QUEUE_KINDS, default="approvals")
    queue.add_argument("--limit", type=int, default=50, help="at most this many steps (default 50)")
    queue.add_argument("--for-me", action="store_true", help="only the steps you may decide (your groups)")

    show = commands.add_parser("show", help="one step: what was proposed, what happened, its ETag")
    show.add_argument("team")
    show.add_argument("ref", help="the step's operation_ref")

    for name, action in DECISIONS.items():
        decide = commands.add_parser(name, help=f"decide: {action}")
        decide.add_argument("team")
        decide.add_argument("ref", help="the step's operation_ref")
        decide.add_argument("--reason", help="why (required for every decision but approve)")
        decide.add_argument(
            "--etag",
            help="the ETag `show` printed: decide only if the step is still what you saw "
            "(without it the step is read now and decided as it is)",
        )
        if name == "approve":
            decide.add_argument("--input", metavar="FILE.json", help="approve this edited input instead (- for stdin)")
            similar = decide.add_argument_group(
                "approve and allow similar", "also make a standing grant for calls like this one (--grant-scope)"
            )
            similar.add_argument(
                "--grant-scope", choices=GRANT_SCOPES, help="the calls it covers: this run, key or team"
            )
            similar.add_argument(
                "--grant-when", metavar="CEL", help="the condition (default: equality on the approved input's fields)"
            )
            similar.add_argument(
                "--grant-expires-in", metavar="SECONDS", type=int, help="at most 604800 (7 days; default 3600)"
            )
            similar.add_argument("--grant-max-uses", metavar="N", type=int, help="1 to 1000 (default 20)")
    rules_cli.add_parser(commands)

    audit = commands.add_parser("audit", help="audit exports: verify one offline (no server, no token)")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True, metavar="AUDIT_COMMAND")
    verify = audit_commands.add_parser("verify", help="recompute every link and seal, check every receipt")
    verify.add_argument("file", help="the export (GET /api/v1/teams/TEAM/audit, or manage.py exportaudit)")
    verify.add_argument("--jwks", metavar="URL|FILE", help="the receipt keys (/.well-known/holdpoint/jwks.json)")
    return parser


def grant_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The decision body's `grant` from the --grant-* options; None without --grant-scope (and a
    usage error when another --grant-* option came without it)."""
    scope = getattr(args, "grant_scope", None)
    given = {
        "when": getattr(args, "grant_when", None),
        "expires_in_s": getattr(args, "grant_expires_in", None),
        "max_uses": getattr(args, "grant_max_uses", None),
    }
    if scope is None:
        if any(value is not None for value in given.values()):
            raise UsageError("--grant-when, --grant-expires-in and --grant-max-uses go with --grant-scope")
        return None
    return {"scope": scope, **{key: value for key, value in given.items() if value is not None}}


def _print_json(value: Any, out: IO[str]) -> None:
    out.write(json.dumps(value, indent=2, ensure_ascii=True) + "\n")


def run(args: argparse.Namespace, reviewer: Reviewer, *, stdin: IO[str], stdout: IO[str]) -> int:
    if args.command == "rules":
        return rules_cli.run(args, reviewer, stdin=stdin, stdout=stdout, safe=safe)
    if args.command == "queue":
        if args.limit < 1:
            raise UsageError("--limit: at least 1")
        steps: list[Step] = []
        for step in reviewer.queue(
            args.team, kind=cast(QueueKind, args.kind), page_size=min(args.limit, 200), for_me=args.for_me
        ):
            steps.append(step)
            if len(steps) >= args.limit:
                break
        if args.json:
            _print_json({"results": steps}, stdout)
        else:
            stdout.write(render_queue(steps, now=now_utc()) + "\n")
        return EXIT_OK

    if args.command == "show":
        seen = reviewer.step(args.team, args.ref)
        if args.json:
            _print_json({"step": seen.step, "etag": seen.etag}, stdout)
        else:
            stdout.write(render_step(args.team, seen.step, seen.etag) + "\n")
        return EXIT_OK

    action = DECISIONS[args.command]
    edited = read_input(args.input, stdin) if getattr(args, "input", None) else None
    grant = grant_of(args)
    etag = args.etag
    if not etag:
        etag = reviewer.step(args.team, args.ref).etag
    answer = reviewer.decide(
        args.team, args.ref, action=action, etag=etag, reason=args.reason, input=edited, grant=grant
    )
    if args.json:
        _print_json(answer, stdout)
        return EXIT_OK
    step, decision = answer["step"], answer["decision"]
    line = (
        f"{decision['action']} {safe(step['operation_ref'])} ({safe(step['tool'])}) as {safe(decision['reviewer'])}: "
        f"now {step['state']} ({safe(step['reason'])})"
    )
    if edited is not None:
        line += f"; approved the edited input, sha256 {input_fingerprint(edited)}"
    made = answer.get("grant")
    if isinstance(made, Mapping):
        line += (
            f"\ngrant {safe(made.get('id'))}: similar calls of {safe(made.get('tool'))} "
            f"where {safe(made.get('when_in_words') or made.get('when'))}; scope {safe(made.get('scope'))}, "
            f"{safe(made.get('max_uses'))} uses at most, until {safe(made.get('expires_at'))}"
        )
    stdout.write(line + "\n")
    return EXIT_OK


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    env = os.environ if environ is None else environ
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the usage
        return int(exit_.code or 0)
    if args.command == "audit":
        try:
            return verify_main(args.file, args.jwks, stdout=stdout, stderr=stderr)
        except (OSError, ValueError, httpx.HTTPError) as error:
            stderr.write(f"holdpoint audit verify: cannot read {error}\n")
            return EXIT_USAGE
    token = env.get("HOLDPOINT_TOKEN", "")
    if not token:
        stderr.write("holdpoint: set HOLDPOINT_TOKEN to your reviewer token (hpr_..., from /account/tokens/)\n")
        return EXIT_USAGE
    url = args.url or env.get("HOLDPOINT_URL") or DEFAULT_URL
    try:
        with Reviewer(url, token, transport=transport) as reviewer:
            return run(args, reviewer, stdin=stdin, stdout=stdout)
    except (UsageError, rules_cli.RulesUsageError) as error:
        stderr.write(f"holdpoint: {error}\n")
        return EXIT_USAGE
    except rules_cli.StaleFile as error:
        stderr.write(f"holdpoint: {error}\n")
        return EXIT_CHANGED
    except HoldpointError as error:
        stderr.write(f"holdpoint: {explain(error, team=args.team, ref=getattr(args, 'ref', None))}\n")
        if args.json:
            problem = {"status": error.status, "code": error.code, "detail": error.detail, "errors": error.errors}
            _print_json({"error": problem}, stdout)
        if error.status is None:
            return EXIT_UNREACHABLE
        return _BY_STATUS.get(error.status, EXIT_ERROR)
