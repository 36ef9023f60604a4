"""What a reviewer's decision costs, in-process: its SQL statements and its wall time.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_ingest CACHE_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/decision_cost.py [--decisions 300] [--rounds 3]

The decision door of every reviewer channel (the dashboard's form, the reviewer API, a chat
button) is `approvals.services.step_decide`. Each measured decision approves a step that an
envelope put in awaiting_approval (the tool needs one approval, the team has one webhook
endpoint, so the transition writes its outbox as the ingest's does). Printed per round: the
statements of one decision (BEGIN and COMMIT included) and the median and p90 wall time.

Needs a migrated database (bench/run leaves hp_bench_ingest migrated).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--show", action="store_true", help="print the statements of the last decision")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("HOLDPOINT_HTTPS", "false")
    os.environ.setdefault("SECRET_KEY", "bench-decision-key-not-a-secret-padded-to-fifty-characters")
    os.environ.setdefault("HOLDPOINT_WEBHOOK_ALLOW_PRIVATE", "true")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from accounts.models import Team
    from accounts.services import reviewer_create, team_create
    from approvals.services import step_decide
    from envelopes import services
    from envelopes.configuration import tool_configure
    from envelopes.models import Step
    from tests.conftest import error_envelope
    from webhooks.services import endpoint_create

    slug = f"bench-decision-{uuid.uuid4().hex[:8]}"
    team = Team.objects.filter(slug=slug).first() or team_create(slug=slug)
    tool_configure(team=team, name="send_email", settings={"required_approvals": 1}, actor="bench")
    endpoint_create(team=team, url="http://127.0.0.1:9/hook")
    reviewer = reviewer_create(username=f"{slug}-rita", password="bench-password-1", team=team, role="reviewer")
    ask = error_envelope(
        retry={"directive": "never", "max_attempts_remaining": 0},
        next_action="request_approval",
        code="AMOUNT_OVER_LIMIT",
        category="authorization",
    )

    def held(count: int) -> list[int]:
        ids = []
        for _ in range(count):
            ref = f"bench/decision/{uuid.uuid4().hex}"
            payload = {**ask, "operation_ref": ref}
            services.envelope_ingest(team=team, payload=payload, dialect="canonical", raw_body=b"")
            ids.append(Step.objects.get(team=team, operation_ref=ref).pk)
        return ids

    for step_id in held(20):  # warm-up: the process's first decisions build their SQL once
        step_decide(team=team, step_id=step_id, actor=reviewer, action="approve", reason="ok")
    print(f"{'round':>5} {'statements':>10} {'p50 ms':>7} {'p90 ms':>7}")
    medians = []
    for number in range(1, args.rounds + 1):
        ids = held(args.decisions)
        times, counts = [], set()
        for step_id in ids:
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                step_decide(team=team, step_id=step_id, actor=reviewer, action="approve", reason="ok")
                times.append(1000 * (time.perf_counter() - started))
            counts.add(len(queries))
        times.sort()
        medians.append(statistics.median(times))
        print(
            f"{number:>5} {'/'.join(map(str, sorted(counts))):>10} "
            f"{statistics.median(times):>7.2f} {times[int(0.9 * len(times))]:>7.2f}"
        )
    print(f"median of the rounds' p50: {statistics.median(medians):.2f} ms")
    if args.show:
        for query in queries.captured_queries:
            print(" ", query["sql"][:160])


if __name__ == "__main__":
    main()
