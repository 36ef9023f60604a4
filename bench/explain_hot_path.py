"""EXPLAIN (ANALYZE, BUFFERS) of every statement the hot path sends (issue 14 point 5), on a
database as it is, e.g. the 1,000,000 envelopes of bench/build_metrics_data.py:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench \\
        .venv/bin/python bench/explain_hot_path.py [--team bench] [--full]

Sends, through Django's test client (the whole middleware, auth, throttle and view), a new-step
ingest, a repeat ingest of that step and a new step's attempt grant, after one warm-up of each
(a team's first envelope for a tool takes the ORM path). Each statement is first run under
EXPLAIN (ANALYZE, BUFFERS) inside a savepoint that is rolled back, then for real, so the plans
are those of the real statements with their real values. Prints each statement's plan (its
node lines; `--full` for every line) and ends with the tables read by a sequential scan, if
any: with 1,000,000 envelopes none of the hot path's reads may grow with the table.

`--team SLUG`: the team to send as (an existing team gets a new API key and a webhook endpoint
if it has none, e.g. build_metrics_data.py's `bench`, whose send_email tool has ~95,000 steps);
default a new team `explain-<time>`. The rows it writes stay (this is a measuring database).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hp_bench")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")
os.environ.setdefault("HOLDPOINT_HTTPS", "false")
os.environ.setdefault("CACHE_URL", "redis://127.0.0.1:6379/9")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/10")
os.environ.setdefault("HOLDPOINT_API_RATE", "1000000/s")
os.environ.setdefault("HOLDPOINT_WEBHOOK_ALLOW_PRIVATE", "true")
os.environ["ALLOWED_HOSTS"] = "testserver"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from bench.load import ATTEMPT, ENVELOPE  # noqa: E402

EXPLAINED = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)
SEQ_SCAN = re.compile(r"Seq Scan on (\S+)")


class Explainer:
    """A database execute wrapper: EXPLAIN (ANALYZE, BUFFERS) each statement in a savepoint
    rolled back, then run it."""

    def __init__(self) -> None:
        self.plans: list[tuple[str, list[str]]] = []

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if not many and EXPLAINED.match(sql):
            raw = context["cursor"].cursor  # psycopg's own cursor: no wrapper, no recursion
            in_transaction = connection.in_atomic_block
            raw.execute("SAVEPOINT explain_hot_path" if in_transaction else "BEGIN")
            raw.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
            plan = [row[0] for row in raw.fetchall()]
            raw.execute("ROLLBACK TO SAVEPOINT explain_hot_path" if in_transaction else "ROLLBACK")
            self.plans.append((sql, plan))
        return execute(sql, params, many, context)


def team_and_key(slug: str | None) -> tuple[str, str]:
    from accounts.models import Team
    from accounts.services import api_key_create, team_create
    from webhooks.models import WebhookEndpoint
    from webhooks.services import endpoint_create

    team = Team.objects.filter(slug=slug).first() if slug else None
    if team is None:
        team = team_create(slug=slug or f"explain-{int(time.time())}")
    if not WebhookEndpoint.objects.filter(team=team).exists():
        endpoint_create(team=team, url="http://127.0.0.1:9/hook")  # so the ingest writes its outbox
    return team.slug, api_key_create(team=team, name="explain").raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--team", help="send as this team (default: a new team)")
    parser.add_argument("--full", action="store_true", help="print every line of each plan")
    args = parser.parse_args()

    slug, key = team_and_key(args.team)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")

    def ingest(ref: str) -> None:
        body = json.dumps({**ENVELOPE, "operation_ref": ref})
        response = client.post("/api/v1/envelopes", data=body, content_type="application/json")
        assert response.status_code in (200, 201), (response.status_code, response.content[:300])

    def attempt(ref: str) -> None:
        body = json.dumps(ATTEMPT)
        response = client.post(f"/api/v1/steps/{ref}/attempts", data=body, content_type="application/json")
        assert response.status_code in (200, 201), (response.status_code, response.content[:300])

    def ref() -> str:
        return f"bench/explain/{uuid.uuid4().hex}"

    ingest(ref())  # warm-up: the tool's first envelope, caches
    attempt(ref())
    new_ref = ref()
    cases: list[tuple[str, Callable[[], None]]] = [
        ("new-step ingest", lambda: ingest(new_ref)),
        ("repeat ingest", lambda: ingest(new_ref)),
        ("attempt grant", lambda: attempt(ref())),
    ]
    sequential: set[str] = set()
    print(f"database {connection.settings_dict['NAME']}, team {slug}")
    for name, send in cases:
        explainer = Explainer()
        with connection.execute_wrapper(explainer):
            send()
        print(f"\n=== {name}: {len(explainer.plans)} statements explained")
        for number, (sql, plan) in enumerate(explainer.plans, 1):
            print(f"--- {number}. {' '.join(sql.split())[:150]}")
            for line in plan:
                if args.full or "->" in line or line == plan[0] or "Execution Time" in line:
                    print(f"    {line}")
            for line in plan:
                sequential.update(SEQ_SCAN.findall(line))
    print(f"\nsequential scans: {', '.join(sorted(sequential)) or 'none'}")


if __name__ == "__main__":
    main()
