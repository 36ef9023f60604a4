"""Where one ingest spends its time, measured in-process (no gunicorn, no load, one thread).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_ingest \\
        .venv/bin/python bench/profile_ingest.py [--requests 2000] [--top 30]

Run it after bench/run (which leaves the migrated hp_bench_ingest behind), or on any migrated
database: it adds a team `bench-profile` and a key the first time. Through Django's test client
(every middleware, DRF, the real service) it prints

1. the SQL of one ingest (CaptureQueriesContext): how many round trips, which ones;
2. the mean wall time of an ingest, and of its parts timed alone (schema validation, redaction,
   the answer's step representation, the throttle, the key lookup);
3. a cProfile of `--requests` ingests: the functions with the most own time and the most
   cumulative time.

Settings are the bench's: DEBUG off, plain http, Redis cache on database 9.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hp_bench_ingest")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")
os.environ.setdefault("HOLDPOINT_HTTPS", "false")
os.environ.setdefault("CACHE_URL", "redis://127.0.0.1:6379/9")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/10")
os.environ.setdefault("HOLDPOINT_API_RATE", "1000000/s")
os.environ["ALLOWED_HOSTS"] = "testserver"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench.load import ENVELOPE  # noqa: E402

TEAM = "bench-profile"


def api_key() -> str:
    from accounts.models import Team
    from accounts.services import api_key_create, team_create

    team = Team.objects.filter(slug=TEAM).first() or team_create(slug=TEAM)
    return api_key_create(team=team, name="profile").raw


def envelope() -> dict[str, Any]:
    return {**ENVELOPE, "operation_ref": f"bench/profile/{uuid.uuid4().hex}"}


def post(client: Client, key: str, body: dict[str, Any] | None = None) -> Any:
    response = client.post(
        "/api/v1/envelopes",
        data=json.dumps(body or envelope()),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 201, (response.status_code, response.content[:500])
    return response


def post_gate(client: Client, key: str, body: dict[str, Any] | None = None) -> Any:
    """The attempt gate for a new step's first attempt (granted), as bench/run's `attempt`."""
    ref = f"bench/profile/gate/{uuid.uuid4().hex}"
    response = client.post(
        f"/api/v1/steps/{ref.replace('/', '%2F')}/attempts",
        data=json.dumps(
            body or {"tool": ENVELOPE["tool"], "input_fingerprint": hashlib.sha256(ref.encode()).hexdigest()}
        ),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 201, (response.status_code, response.content[:500])
    return response


def mean_us(function: Any, repeat: int) -> float:
    function()
    start = time.perf_counter()
    for _ in range(repeat):
        function()
    return 1e6 * (time.perf_counter() - start) / repeat


def parts(key: str, repeat: int) -> list[tuple[str, float]]:
    """The pieces of an ingest, each timed alone (microseconds per call)."""
    from django.core.cache import cache
    from rest_framework.test import APIRequestFactory

    from accounts.auth import ApiKeyAuthentication, ApiKeyRateThrottle
    from accounts.models import ApiKey
    from envelopes import schema
    from envelopes.models import Step
    from envelopes.presenters import step_representation
    from envelopes.redaction import looks_like_instruction, redact
    from envelopes.schema import validation

    now = datetime.now(UTC)
    body = envelope()
    context = schema.ToolContext()
    step = Step.objects.select_related("tool", "last_envelope").order_by("-id").first()
    factory = APIRequestFactory()
    request = factory.post("/api/v1/envelopes", HTTP_AUTHORIZATION=f"Bearer {key}")
    authenticator = ApiKeyAuthentication()
    key_row = ApiKey.objects.get(key_hash=ApiKey.hash_key(key))

    class View:
        throttle_scope = None

    def throttle() -> None:
        drf_request = type("R", (), {"auth": key_row, "user": None, "META": {}})()
        ApiKeyRateThrottle().allow_request(drf_request, View())

    texts = [ENVELOPE["agent_message"], ENVELOPE["user_message"], "recipient_email"]
    measured = [
        ("schema.parse_envelope (jsonschema + rules + redaction)", lambda: schema.parse_envelope(
            body, dialect="canonical", context=context, received_at=now
        )),
        ("  jsonschema_rs is_valid alone (every envelope)", lambda: validation._ERROR_SHAPE.is_valid(body)),
        ("  jsonschema iter_errors (invalid only)", lambda: list(validation._ERROR_VALIDATOR.iter_errors(body))),
        ("  redact + looks_like_instruction, 3 texts", lambda: [
            (redact(t), looks_like_instruction(t)) for t in texts
        ]),
        ("step_representation (answer body)", lambda: step_representation(step)),
        ("auth: key lookup (1 query)", lambda: authenticator.authenticate(request)),
        ("throttle: cache get+set (Redis)", throttle),
        ("cache.get alone (Redis round trip)", lambda: cache.get("bench-profile-missing")),
    ]  # fmt: skip
    return [(name, mean_us(function, repeat)) for name, function in measured]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--gate", action="store_true", help="profile the attempt gate (a grant) instead of the ingest")
    parser.add_argument("--dump", metavar="FILE", help="also write the cProfile stats to FILE (pstats format)")
    args = parser.parse_args()
    key = api_key()
    client = Client()
    call, what = (post_gate, "grant") if args.gate else (post, "ingest")
    for _ in range(100):  # warm caches, connections, imports
        call(client, key)

    with CaptureQueriesContext(connection) as queries:
        call(client, key)
    print(f"SQL of one {what}: {len(queries.captured_queries)} queries")
    for number, query in enumerate(queries.captured_queries, 1):
        sql = " ".join(query["sql"].split())
        print(f"  {number:>2}. {query['time']:>6}s  {sql[:150]}{'...' if len(sql) > 150 else ''}")

    bodies = [None if args.gate else envelope() for _ in range(args.requests)]
    start, cpu_start = time.perf_counter(), time.process_time()
    for body in bodies:
        call(client, key, body)
    wall = (time.perf_counter() - start) / args.requests
    cpu = (time.process_time() - cpu_start) / args.requests
    print(
        f"\none {what} through the test client: {1000 * wall:.2f} ms wall, {1000 * cpu:.2f} ms CPU of this"
        f" process (mean of {args.requests}, one thread; PostgreSQL's CPU not included)"
    )
    print("its parts, timed alone:")
    for name, us in parts(key, repeat=max(200, args.requests // 4)):
        print(f"  {us:>8.1f} us  {name}")

    # Timed by CPU, not wall clock: on a busy machine, waits and preemption would swamp it.
    profiler = cProfile.Profile(time.process_time)
    bodies = [None if args.gate else envelope() for _ in range(args.requests)]
    profiler.enable()
    for body in bodies:
        call(client, key, body)
    profiler.disable()
    if args.dump:
        profiler.dump_stats(args.dump)  # for pstats: .print_callees("event_plan") and so on
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order)
        stats.print_stats(args.top)
        text = out.getvalue()
        print(f"\ncProfile (CPU time of this process) of {args.requests} {what}s, by {order}:")
        print(text[text.index("   ncalls") :].rstrip())


if __name__ == "__main__":
    main()
