"""Time the metrics API, the tool page, the overview and /metrics on the bench database.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench \\
        .venv/bin/python bench/measure_metrics.py [--runs 15] [--cold-runs 3]

Run bench/build_metrics_data.py first. Requests go through Django's test client in this
process (middleware, API-key or session auth, the view, the template: everything but the
socket), as of one minute before the last whole hour of the data: the clock is set there
(time-machine) and the rollups to where beat, running every minute, keeps them (closed hours
rolled; the current hour rolled up to a minute ago, the rest read live).

- warm: the median (and the slowest) of `--runs` requests in one process, after one request
  that is not counted;
- cold: the first request to the page in a freshly started process, on a new database
  connection (median of `--cold-runs` processes; the process first answers /healthz and the
  login page and touches the cache, so that its one-time setup is not counted). PostgreSQL's
  buffer cache stays as it is: emptying it would mean restarting a server other work shares.

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
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hp_bench")
os.environ.setdefault("CACHE_URL", "redis://127.0.0.1:6379/7")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

HOT = "create_invoice"
warnings.filterwarnings("ignore", message="No directory at")  # whitenoise, without collectstatic


def _targets(now: datetime) -> dict[str, tuple[str, str]]:
    """name -> (who, path): `api` requests carry the API key, `page` ones a staff session."""

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


def _as_of() -> datetime:
    """One minute before the last whole hour of the data, with the rollups where beat (every
    minute) keeps them: closed hours rolled, the current hour rolled up to a minute ago."""
    from envelopes.models import Envelope, Tool
    from metrics.models import MetricsWatermark
    from metrics.services import SETTLE, floor_hour, metrics_rollup

    hot = Tool.objects.get(team__slug="bench", name=HOT)
    last = Envelope.objects.filter(tool=hot).order_by("-received_at").values_list("received_at", flat=True).first()
    assert last is not None, "no data: run bench/build_metrics_data.py"
    now = floor_hour(last) - timedelta(minutes=1)
    MetricsWatermark.objects.update_or_create(
        pk=MetricsWatermark.SINGLETON, defaults={"rolled_through": floor_hour(now - SETTLE), "partial_through": None}
    )
    metrics_rollup(now=now)
    return now


@contextmanager
def _clock(now: datetime) -> Iterator[None]:
    import time_machine

    with time_machine.travel(now, tick=True):
        yield


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


@contextmanager
def _live_only() -> Iterator[None]:
    """A transaction, rolled back, in which the watermark is unset: every hour is read live."""
    from django.db import transaction

    from metrics.models import MetricsWatermark

    with transaction.atomic():
        MetricsWatermark.objects.update(rolled_through=None)
        yield
        transaction.set_rollback(True)


def measure_cold(name: str, now: datetime) -> None:
    import django

    django.setup()
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client

    with _clock(now):
        who, path = _targets(now)[name]
        client = _client(who)  # logging in is not part of the request
        # The process's own one-time setup is not the page's: Django's first request, the cache
        # client (importing redis takes ~0.2 s), the template engine and base.html.
        client.get("/healthz", secure=True)
        cache.get("bench-warm-up")
        Client().get("/accounts/login/", secure=True)
        connection.close()  # the request opens a fresh connection
        elapsed, queries = _timed(lambda: client.get(path, secure=True))
    print(json.dumps({"ms": elapsed, "queries": queries}))


def measure(runs: int, cold_runs: int) -> None:
    import django

    django.setup()
    from django.db import connection

    from envelopes.models import Envelope, Tool

    now = _as_of()
    hot = Tool.objects.get(team__slug="bench", name=HOT)
    print(f"database: {connection.settings_dict['NAME']}  envelopes: {Envelope.objects.count():,}  "
          f"hot tool {HOT}: {Envelope.objects.filter(tool=hot).count():,}  as of {now:%Y-%m-%d %H:%M} UTC  "
          f"load average: {os.getloadavg()[0]:.1f}")
    print(f"{'request':<24}{'warm median':>12}{'warm max':>10}{'cold median':>13}{'queries':>9}")
    with _clock(now):
        targets = _targets(now)
        for name, (who, path) in targets.items():
            client = _client(who)
            client.get(path, secure=True)
            request = partial(client.get, path, secure=True)
            timings = [_timed(request) for _ in range(runs)]
            colds = []
            for _ in range(cold_runs):
                out = subprocess.run(
                    [sys.executable, __file__, "--cold", name, "--as-of", now.isoformat()],
                    capture_output=True, text=True, check=True, env=os.environ,
                )
                colds.append(json.loads(out.stdout.strip().splitlines()[-1])["ms"])
            warm = [ms for ms, _ in timings]
            print(f"{name:<24}{statistics.median(warm):>10.1f}ms{max(warm):>8.1f}ms"
                  f"{statistics.median(colds):>11.1f}ms{timings[0][1]:>9}", flush=True)

        print("\nwithout the rollups (every hour read live from the indexes):")
        for name in ("api 24h (default)", "api 7d", "api 30d", "tool page 24h", "tool page 30d"):
            who, path = targets[name]
            client = _client(who)
            with _live_only():
                client.get(path, secure=True)
                repeat = max(3, runs // 3)
                request = partial(client.get, path, secure=True)
                warm = [_timed(request)[0] for _ in range(repeat)]
            print(f"{name:<24}{statistics.median(warm):>10.1f}ms{max(warm):>8.1f}ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--cold", help=argparse.SUPPRESS)
    parser.add_argument("--as-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold:
        measure_cold(args.cold, datetime.fromisoformat(args.as_of).astimezone(UTC))
    else:
        measure(args.runs, args.cold_runs)


if __name__ == "__main__":
    main()
