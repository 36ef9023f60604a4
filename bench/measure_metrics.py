"""Time the metrics API, the tool page, the overview and /metrics on the bench database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench \\
        .venv/bin/python bench/measure_metrics.py [--runs 15] [--cold-runs 3]

Run bench/build_metrics_data.py first. Requests go through Django's test client in this
process (middleware, API-key auth, the view, the template: everything but the socket).

- warm: the median (and the slowest) of `--runs` requests in one process, after one request
  that is not counted;
- cold: the first request to the page in a freshly started process, on a new database
  connection (median of `--cold-runs` processes; the process first answers /healthz, so that
  Django's own lazy setup is not counted). PostgreSQL's buffer cache stays as it is: emptying it
  would mean restarting a server other work shares.

Also measured, for comparison, with the rollups ignored (every hour read live from the indexes,
as before the beat task ever ran): the cost the rollups save.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hp_bench")
os.environ.setdefault("CACHE_URL", "redis://127.0.0.1:6379/7")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

HOT = "create_invoice"


def _targets() -> dict[str, tuple[str, str]]:
    """name -> (who, path): `api` requests carry the API key, `page` ones a staff session."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC).replace(microsecond=0)

    def window(days: int) -> str:
        since = (now - timedelta(days=days)).isoformat().replace("+00:00", "Z")
        return f"?since={since}&until={now.isoformat().replace('+00:00', 'Z')}"

    api = f"/api/v1/tools/{HOT}/metrics"
    return {
        "api 24h (default)": ("api", api),
        "api 7d": ("api", api + window(7)),
        "api 30d": ("api", api + window(30)),
        "api 90d": ("api", api + window(90)),
        "tool page 24h": ("page", f"/tools/{HOT}/?team=bench"),
        "tool page 7d": ("page", f"/tools/{HOT}/?team=bench&window=7d"),
        "tool page 30d": ("page", f"/tools/{HOT}/?team=bench&window=30d"),
        "overview": ("page", "/overview/"),
        "prometheus /metrics": ("page", "/metrics"),
    }


def _client(who: str):  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    if who == "api":
        key = (ROOT / "var" / "bench_api_key").read_text().strip()
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    else:
        user = get_user_model().objects.get(username="bench-admin")
        if not user.is_staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        client.force_login(user)
    return client


def _timed(request: Callable[[], object]) -> tuple[float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = request()
        elapsed = (time.perf_counter() - started) * 1000
    status = getattr(response, "status_code", 0)
    if status != 200:
        raise SystemExit(f"unexpected status {status}: {getattr(response, 'content', b'')[:300]!r}")
    return elapsed, len(queries)


def _live_only() -> object:
    """A transaction in which the watermark is unset, so every window is read live."""
    from django.db import transaction

    from metrics.models import MetricsWatermark

    atomic = transaction.atomic()
    atomic.__enter__()
    MetricsWatermark.objects.update(rolled_through=None)
    return atomic


def measure_cold(name: str) -> None:
    import django

    django.setup()
    who, path = _targets()[name]
    client = _client(who)  # logging in is not part of the request
    from django.db import connection

    client.get("/healthz", secure=True)  # Django's own first-request setup is not ours to count
    connection.close()  # the request opens a fresh connection
    elapsed, queries = _timed(lambda: client.get(path, secure=True))
    print(json.dumps({"ms": elapsed, "queries": queries}))


def measure_warm(runs: int, cold_runs: int) -> None:
    import django

    django.setup()
    from django.db import connection, transaction

    from envelopes.models import Envelope, Tool

    hot = Tool.objects.get(team__slug="bench", name=HOT)
    print(f"database: {connection.settings_dict['NAME']}  envelopes: {Envelope.objects.count():,}  "
          f"hot tool {HOT}: {Envelope.objects.filter(tool=hot).count():,}  load: {os.getloadavg()[0]:.1f}")
    print(f"{'request':<30}{'warm median':>12}{'warm max':>10}{'cold median':>13}{'queries':>9}")
    results = {}
    for name, (who, path) in _targets().items():
        client = _client(who)
        client.get(path, secure=True)
        timings = [_timed(lambda client=client, path=path: client.get(path, secure=True)) for _ in range(runs)]
        colds = []
        for _ in range(cold_runs):
            out = subprocess.run(
                [sys.executable, __file__, "--cold", name], capture_output=True, text=True, check=True, env=os.environ
            )
            colds.append(json.loads(out.stdout.strip().splitlines()[-1])["ms"])
        warm = [ms for ms, _ in timings]
        results[name] = (statistics.median(warm), max(warm), statistics.median(colds), timings[0][1])
        print(f"{name:<30}{results[name][0]:>10.1f}ms{results[name][1]:>8.1f}ms{results[name][2]:>11.1f}ms"
              f"{results[name][3]:>9}")

    print("\nwithout the rollups (every hour read live from the indexes):")
    for name in ("api 24h (default)", "api 7d", "api 30d", "tool page 24h", "tool page 30d"):
        who, path = _targets()[name]
        client = _client(who)
        atomic = _live_only()
        try:
            client.get(path, secure=True)
            repeat = max(3, runs // 3)
            warm = [_timed(lambda client=client, path=path: client.get(path, secure=True))[0] for _ in range(repeat)]
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)  # type: ignore[attr-defined]
        print(f"{name:<30}{statistics.median(warm):>10.1f}ms{max(warm):>8.1f}ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--cold", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold:
        measure_cold(args.cold)
    else:
        measure_warm(args.runs, args.cold_runs)


if __name__ == "__main__":
    main()
