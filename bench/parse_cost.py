"""What one `schema.parse_envelope` costs, in microseconds per call, on the envelopes an ingest sees.

    .venv/bin/python bench/parse_cost.py [--ref COMMIT] [--number 2000] [--repeat 7]

Pure Python, no database, no Django settings. Each case is timed as the best of `--repeat` runs of
`--number` calls (the best, because the machine is shared and anything slower is a neighbour; with
`--ref`, the two modules take turns run by run):

- `error, same texts`: seed 000's INVALID_RECIPIENT_ADDRESS envelope (the body bench/run posts),
  the same every call, as an agent repeats its messages: the clean-text cache answers.
- `error, new texts`: the same envelope with an `agent_message` never seen before in every call,
  so the texts are redacted afresh (the cache's worst case; `user_message` and the detail still
  repeat).
- `success`: `ok: true` with a `result` (hashed) and a `verification`.
- `compact`, `mcp`: the two other dialects, valid.
- `rejected`: a schema error (the reference validator runs and names it).

With `--ref COMMIT`, envelopes/schema.py as it was at that commit is loaded beside the current one
(it imports today's `envelopes.contract` and `envelopes.redaction`) and timed on the same cases,
so that before and after come from one run on one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envelopes import schema as current  # noqa: E402

RECEIVED = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

SEED_000 = {
    "ok": False,
    "tool": "send_email",
    "code": "INVALID_RECIPIENT_ADDRESS",
    "category": "validation",
    "commit_state": "not_committed",
    "retry": {"directive": "after_input_fix", "max_attempts_remaining": 1},
    "next_action": "correct_input",
    "operation_ref": "run_81/step_4",
    "safe_details": {"field": "recipient_email"},
    "agent_message": "recipient_email is invalid; request a corrected address.",
    "user_message": "I need a valid recipient address before I can send this.",
}
SUCCESS = {
    "ok": True,
    "tool": "create_invoice",
    "operation_ref": "run_81/step_4",
    "commit_state": "committed",
    "occurred_at": "2026-11-29T11:59:30Z",
    "result": {"invoice": "in_1", "amount": 42, "lines": [{"sku": "A-1", "qty": 2}]},
    "verification": {"checked_at": "2026-11-29T11:59:00Z", "evidence_ref": "inv_1"},
}
COMPACT = {  # seed 004's rate-limited example, with the contract's tool and operation_ref
    "code": "RATE_LIMITED",
    "category": "rate_limit",
    "retryable": True,
    "retry_after_ms": 2000,
    "scope": "service",
    "correlation_id": "c-77f0",
    "tool": "enrich_contact",
    "operation_ref": "run_9/contact_4128",
}
MCP = {"content": [{"type": "text", "text": "Invoice created."}], "structuredContent": SUCCESS, "isError": False}
REJECTED = {**SEED_000, "category": "weather", "attempt": "2"}

# (name, dialect, payload or None for "a new agent_message every call")
CASES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("error, same texts", "canonical", SEED_000),
    ("error, new texts", "canonical", None),
    ("success", "canonical", SUCCESS),
    ("compact", "compact", COMPACT),
    ("mcp", "mcp", MCP),
    ("rejected", "canonical", REJECTED),
]


def schema_at(commit: str) -> ModuleType:
    """envelopes/schema.py as it was at `commit`, as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:envelopes/schema.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / f"schema_at_{commit[:12]}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def batch(module: ModuleType, dialect: str, payload: dict[str, Any] | None, number: int) -> float:
    """Seconds for `number` calls of `module.parse_envelope`."""
    context = module.ToolContext()
    parse: Callable[..., Any] = module.parse_envelope
    rejected = module.EnvelopeRejected
    if payload is None:  # built before the clock starts: only the parse is timed
        stamp = time.time_ns()
        payloads = [
            {**SEED_000, "agent_message": f"recipient_email is invalid ({stamp}-{i}); ask for a new one."}
            for i in range(number)
        ]
    else:
        payloads = [payload] * number
    started = time.perf_counter()
    for body in payloads:
        with contextlib.suppress(rejected):
            parse(body, dialect=dialect, context=context, received_at=RECEIVED)
    return time.perf_counter() - started


def per_call(
    modules: list[ModuleType], dialect: str, payload: dict[str, Any] | None, number: int, repeat: int
) -> list[float]:
    """Microseconds per call for each module, the best of `repeat` runs of `number` calls. The
    modules take turns run by run, so that a busy spell of the machine weighs on each alike."""
    best = [float("inf")] * len(modules)
    for _ in range(repeat):
        for index, module in enumerate(modules):
            best[index] = min(best[index], batch(module, dialect, payload, number))
    return [seconds / number * 1e6 for seconds in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", help="also time envelopes/schema.py at this commit (before)")
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    modules = [("now", current)]
    if args.ref:
        modules.insert(0, (args.ref[:10], schema_at(args.ref)))
    head = " | ".join(f"{label} µs/call" for label, _ in modules)
    print(f"| case | {head} |" + (" after/before |" if args.ref else ""))
    print("|---|" + "---:|" * (len(modules) + (1 if args.ref else 0)))
    for name, dialect, payload in CASES:
        times = per_call([module for _, module in modules], dialect, payload, args.number, args.repeat)
        cells = " | ".join(f"{value:.1f}" for value in times)
        ratio = f" {times[-1] / times[0]:.2f} |" if args.ref else ""
        print(f"| {name} | {cells} |{ratio}", flush=True)


if __name__ == "__main__":
    main()
