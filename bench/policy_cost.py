"""What the team's rules cost one call of the gate, in-process (issue 25 point 7): the verdict of
bench_setup.py's 50 rules and a grant on the attempt-rules body, without the database and HTTP
that bench/run's attempt-rules target adds (best of 5 rounds, one thread).

    python bench/policy_cost.py [-n 2000]"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")

import django

django.setup()

from bench.bench_setup import fifty_rules  # noqa: E402 (after django.setup())
from bench.load import ATTEMPT_INPUT  # noqa: E402
from policy.evaluation import CallFacts, gate_verdict  # noqa: E402
from policy.models import Grant, Rule  # noqa: E402

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=2000)
    count = parser.parse_args().n
    rules = [
        Rule(id=n + 1, version=1, approvals=1, approvers="", enabled=True, **r) for n, r in enumerate(fifty_rules())
    ]
    grant = Grant(
        id=1,
        tool="send_email",
        when='has(input.to) && input.to == "vip@example.com"',
        scope="team",
        scope_value="",
        created_by="bench",
        expires_at=NOW + timedelta(days=1),
        max_uses=1000,
        uses=0,
    )
    facts = CallFacts(
        tool="send_email",
        input=ATTEMPT_INPUT,
        has_input=True,
        run_id="",
        key="bench",
        attempt=1,
        code="",
        state="",
        now=NOW,
    )
    started = time.perf_counter()
    first = gate_verdict(rules, [grant], facts)
    print(f"first call (compiles): {(time.perf_counter() - started) * 1e3:.1f} ms; evaluated {first.evaluated}")
    assert first.effect is None and not first.errors, first
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(count):
            gate_verdict(rules, [grant], facts)
        best = min(best, (time.perf_counter() - started) / count)
    print(f"a call's verdict: {best * 1e6:.1f} µs ({first.evaluated} rules and grants evaluated)")


if __name__ == "__main__":
    main()
