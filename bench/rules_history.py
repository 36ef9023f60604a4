"""What the test against history costs (rules/history.py): a team with N granted attempts of one
tool in the window, a draft of R rules naming it, timed end to end (the two reads and every
evaluation of both sets) as `POST …/rules/test` runs it.

    DATABASE_URL=postgres://…/somedb .venv/bin/python bench/rules_history.py [--attempts 12000] [--rules 3]

Makes its own team (`bench-history-<time>`) on that database (migrated) and leaves it there.
The rows are written with bulk_create, not through the gate: the test reads them as they are.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-rules-history-not-a-secret-padded-to-fifty-characters")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.services import team_create  # noqa: E402
from bench.bulk import steps_bulk  # noqa: E402
from envelopes.models import Attempt, Tool  # noqa: E402
from rules.history import history_test  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempts", type=int, default=12_000)
    parser.add_argument("--rules", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    team = team_create(slug=f"bench-history-{int(time.time())}")
    tool = Tool.objects.create(team=team, name="issue_refund")
    now = timezone.now()
    refs = (f"run/{n}" for n in range(args.attempts))
    steps = steps_bulk(team=team, tool=tool, refs=refs, state="in_progress", reason="attempt_granted", at=now)
    Attempt.objects.bulk_create(
        Attempt(step=step, number=1, fingerprint="0" * 64, granted_at=now,
                input={"order": f"ord_{n}", "amount_cents": n * 10, "customer": f"c_{n % 50}"})
        for n, step in enumerate(steps)
    )  # fmt: skip
    kinds = ["require_approval", "deny", "allow"]
    draft = [
        {"name": f"rule-{n}", "tools": ["issue_refund"], "effect": kinds[n % 3],
         "when": f'has(input.amount_cents) && input.amount_cents > {50000 + n} && input.customer != "c_{n}"',
         "mode": "shadow" if n % 2 else "enforce"}
        for n in range(args.rules)
    ]  # fmt: skip
    best = None
    for _ in range(args.repeat):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            report = history_test(team=team, draft=draft, current=draft[:1])
            elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    print(f"{args.attempts} attempts in the window, {args.rules} draft rules: evaluated {report.attempts} "
          f"(capped {report.capped}), best of {args.repeat}: {best:.2f} s, {len(queries)} queries, "
          f"{best / max(report.attempts, 1) * 1e6:.0f} µs per attempt")  # fmt: skip


if __name__ == "__main__":
    main()
