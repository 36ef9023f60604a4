"""Where one ingest's (or grant's) wall time goes, phase by phase, in-process (no gunicorn).

    HOLDPOINT_WEBHOOK_ALLOW_PRIVATE=true DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_ingest \\
        .venv/bin/python bench/phases.py [--requests 3000] [--gate] [--worker-started]

Unlike cProfile, which multiplies the cost of every Python call, this wraps a dozen functions
of the request's path with a clock and nothing else: each request's time in each phase is
recorded, and the medians are printed beside the median of the whole request (through Django's
test client: every middleware, DRF, the real views). Phases nest (the context read is inside
the hot path); "other" is the request's time outside every top-level phase (middleware, URL
resolution, DRF's dispatch, the test client). The database work of a phase is in its wall
time: a round trip waits for PostgreSQL.

Settings and team as bench/profile_ingest.py (run bench/run first, or migrate the database);
the team gets one webhook endpoint, as bench/run's `bench` team, so every ingest and grant
writes the outbox and marks a delivery as pending (`webhooks.outbox.enqueue_delivery`). No worker
runs, so the mark stays and no task is enqueued; `--worker-started` clears the mark after each
request, as a worker does when it starts the task, so each request enqueues one (Celery's
`apply_async`), which is what an agent's calls meet in production with a worker keeping up. The
phase "after the response" is that work, which `envelopes.after_response` runs once the
response is sent: it is inside the request's time here (the test client waits for
`request_finished`), not inside the time an agent waits.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import profile_ingest as base  # bench/ is on sys.path when run as a script; it sets Django up
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import Client

AFTER = "after the response: delivery mark, enqueue"
_spent: dict[str, float] = defaultdict(float)


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _spent[name] += time.perf_counter() - start

    return wrapper


def instrument() -> list[tuple[str, bool]]:
    """Wrap the phases; their names in print order, with whether each is top-level."""
    from rest_framework.renderers import JSONRenderer
    from rest_framework.request import Request

    from accounts import auth
    from envelopes import after_response, api, modelsql, schema, services, transitions
    from envelopes.services import attempts, ingest
    from webhooks import outbox

    phases = [
        (auth.ApiKeyAuthentication, "authenticate", "auth: the key lookup", True),
        (auth.ApiKeyRateThrottle, "allow_request", "throttle: one Redis script", True),
        (Request, "_parse", "body: DRF parser", True),
        (services, "envelope_ingest", "ingest: the service (BEGIN..COMMIT)", True),
        (services, "attempt_request", "grant: the service (BEGIN..COMMIT)", True),
        (api, "_attempt_request_plain", "grant: body check", True),
        (ingest, "step_context", "  context read (BEGIN + 1 statement)", False),
        (attempts, "step_context", "  context read (BEGIN + 1 statement)", False),
        (schema, "parse_envelope", "  schema, rules, redaction", False),
        (transitions, "event_plan", "  state machine + audit hash", False),
        (ingest, "envelope_build", "  envelope row built", False),
        (transitions, "plan_write", "  the write (1 statement)", False),
        (modelsql, "insert", "    rows' values (modelsql.insert)", False),
        (modelsql, "update", "    step's values (modelsql.update)", False),
        (transitions, "step_representation", "    the event's step shape", False),
        (outbox, "_statement", "    the outbox message (its JSON body)", False),
        (modelsql, "combined", "    statement text + values", False),
        (modelsql, "fetchone_bound", "SQL sent and answered (every hot statement)", False),
        (modelsql, "execute_bound", "SQL sent and answered (every hot statement)", False),
        (BaseDatabaseWrapper, "commit", "  COMMIT", False),
        (after_response, "_run", AFTER, True),
        (services.IngestAnswer, "as_dict", "answer: as_dict", True),
        (services.AttemptGrant, "as_dict", "answer: as_dict", True),
        (JSONRenderer, "render", "answer: JSON render", True),
    ]
    for owner, attribute, name, _top in phases:
        if hasattr(owner, attribute):
            setattr(owner, attribute, _timed(name, getattr(owner, attribute)))
    seen: dict[str, bool] = {}
    for _, _, name, top in phases:
        seen.setdefault(name, top)
    return list(seen.items())


def endpoint() -> None:
    """One webhook endpoint for the profile's team (nothing listens: no worker delivers here)."""
    from accounts.models import Team
    from webhooks.models import WebhookEndpoint
    from webhooks.services import endpoint_create

    team = Team.objects.get(slug=base.TEAM)
    if not WebhookEndpoint.objects.filter(team=team, active=True).exists():
        endpoint_create(team=team, url="http://127.0.0.1:9/hook")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--gate", action="store_true", help="the attempt gate (a grant) instead of the ingest")
    parser.add_argument(
        "--worker-started", action="store_true", help="clear the delivery mark after each request (see above)"
    )
    args = parser.parse_args()
    key = base.api_key()
    endpoint()
    from webhooks.outbox import delivery_pending_clear

    client = Client()
    call = base.post_gate if args.gate else base.post
    names = instrument()
    for _ in range(300):  # warm caches, connections, prepared statements
        call(client, key)
    per_phase: dict[str, list[float]] = defaultdict(list)
    totals: list[float] = []
    answered: list[float] = []  # the request without the work after its response
    cpu_start = time.process_time()
    for _ in range(args.requests):
        _spent.clear()
        start = time.perf_counter()
        call(client, key)
        total = time.perf_counter() - start
        totals.append(total)
        answered.append(total - _spent.get(AFTER, 0.0))
        if args.worker_started:
            delivery_pending_clear()
        for name, _top in names:
            per_phase[name].append(_spent.get(name, 0.0))
        per_phase["other"].append(total - sum(_spent.get(name, 0.0) for name, top in names if top))
    what = "grant" if args.gate else "ingest"
    cpu = (time.process_time() - cpu_start) / args.requests
    print(
        f"one {what} in-process, {args.requests} requests: median {1000 * statistics.median(totals):.3f} ms wall,"
        f" mean {1000 * cpu:.3f} ms CPU of this process (the test client's included)"
    )
    print(f"  until the response, without the work after it: median {1000 * statistics.median(answered):.3f} ms")
    print(f"{'phase':<44} {'median ms':>10} {'mean ms':>9}")
    for name, _top in [*names, ("other", True)]:
        values = per_phase[name]
        if not any(values):
            continue
        print(f"{name:<44} {1000 * statistics.median(values):>10.3f} {1000 * statistics.fmean(values):>9.3f}")


if __name__ == "__main__":
    main()
