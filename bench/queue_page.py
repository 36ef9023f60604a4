"""Time the reviewers' queue page (`/`) on a database from bench/build_queue_data.py.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_queue \\
        .venv/bin/python bench/queue_page.py [-n 30] [--explain] [--path /?team=bench]

Renders the page through Django's test Client as `bench-reviewer` (a member of every team), once
to warm up and then `-n` times, and prints the median and worst wall time, the number of queries
and the slowest of them. `--explain` prints EXPLAIN (ANALYZE, BUFFERS) of each of the page's
queries, once. The nav counts' endpoint (`/queue-counts`, polled by every open dashboard) is
timed the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hp_bench_queue")
os.environ.setdefault("SECRET_KEY", "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOWED_HOSTS", "testserver")
os.environ.setdefault("HOLDPOINT_HTTPS", "false")
os.environ.setdefault("LOG_LEVEL", "WARNING")


def time_path(client, path: str, n: int) -> tuple[list[float], list[float], list[dict[str, str]]]:  # type: ignore[no-untyped-def]
    """Wall times and this process's CPU times (Django's part: PostgreSQL's is not in it) of `n`
    renderings, and the queries of one more."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert client.get(path).status_code == 200  # warm: templates, the connection, the plan caches
    walls, cpus = [], []
    for _ in range(n):
        start, cpu = time.perf_counter(), time.process_time()
        response = client.get(path)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as captured:
        client.get(path)
    return walls, cpus, list(captured.captured_queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=30)
    parser.add_argument("--path", default="/")
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-reviewer"))
    for path in (args.path, "/queue-counts"):
        walls, cpus, queries = time_path(client, path, args.n)
        slowest = sorted(queries, key=lambda q: -float(q["time"]))[:3]
        print(
            f"{path}: median {statistics.median(walls) * 1000:.1f} ms, worst {max(walls) * 1000:.1f} ms "
            f"over {args.n} (Django's CPU: median {statistics.median(cpus) * 1000:.1f} ms); {len(queries)} queries, "
            f"{sum(float(q['time']) for q in queries) * 1000:.1f} ms in SQL"
        )
        for query in slowest:
            print(f"    {float(query['time']) * 1000:6.1f} ms  {query['sql'][:160]}")
        if args.explain:
            with connection.cursor() as cursor:
                for query in queries:
                    if not query["sql"].lstrip("(").startswith("SELECT"):
                        continue
                    cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {query['sql']}")
                    print("\n" + query["sql"][:300])
                    print("\n".join(row[0] for row in cursor.fetchall()))


if __name__ == "__main__":
    main()
