"""What the API's door costs in CPU, in-process: the floor's INSERT bare and behind the door.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_ingest CACHE_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/door_cost.py [--requests 3000] [--rounds 6]

bench/run's floor-authed/floor ratio moves by more than its margin from round to round on a
2-core machine whose speed wanders (0.45 to 0.77 in one run). This measures the part of it that
the code decides, without the network, gunicorn or the load script: each target is a process of
its own that calls Django's WSGI handler directly (`floor`: bench.floor.settings, the bare view;
`floor-authed`: bench.floor.authed_settings, the same INSERT behind the app's middleware, DRF,
the API key and the throttle) with seed 000's envelope, and counts its own CPU per request
(process time: what the request costs this process, its waits for PostgreSQL and Redis
excluded). Rounds alternate the two, each in a fresh process warmed with 300 requests, so that
the machine's moods hit both alike. Printed: each round, the medians, and the door's CPU over
the floor's. PostgreSQL's own CPU per request is not counted here (bench/run's "pg cpu":
0.05 to 0.1 ms more for floor-authed, the key's throttle window when the cache is the database).

Needs the database bench/run leaves (or any migrated one with the floor's table: bench/run
migrates both), and CACHE_URL as bench/run gives the app (redis://127.0.0.1:6379/9).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"floor": "bench.floor.settings", "floor-authed": "bench.floor.authed_settings"}
PATHS = {"floor": "/floor", "floor-authed": "/api/v1/floor"}
WARM = 300


def child(target: str, requests: int) -> None:
    """One round in this process: WARM requests, then `requests` measured; prints JSON."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS[target]
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from load import ENVELOPE, REF_MARK

    key = _api_key() if target == "floor-authed" else ""
    application = WSGIHandler()
    template = json.dumps(ENVELOPE).encode()
    statuses: list[str] = []

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> None:
        statuses.append(status)

    def call() -> None:
        body = template.replace(REF_MARK, f"bench/door/{uuid.uuid4().hex}".encode())
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": PATHS[target],
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1",
            "HTTP_AUTHORIZATION": f"Bearer {key}",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
        }
        response = application(environ, start_response)
        b"".join(response)
        response.close()  # request_finished, as a WSGI server sends it

    for _ in range(WARM):
        call()
    statuses.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(requests):
        call()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert set(statuses) == {"201 Created"}, set(statuses)
    print(json.dumps({"cpu_ms": 1000 * cpu / requests, "wall_ms": 1000 * wall / requests}))


def _api_key() -> str:
    from accounts.models import Team
    from accounts.services import api_key_create, team_create

    team = Team.objects.filter(slug="bench-door").first() or team_create(slug="bench-door")
    return api_key_create(team=team, name="door").raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests)
        return
    env = {**os.environ, "DEBUG": "false", "HOLDPOINT_HTTPS": "false", "ALLOWED_HOSTS": "127.0.0.1"}
    env.setdefault("SECRET_KEY", "bench-door-key-not-a-secret-padded-to-fifty-characters")
    env.setdefault("HOLDPOINT_API_RATE", "1000000/s")  # as bench/run: counted, never refused
    results: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    print(f"{'round':>5} {'target':<13} {'cpu ms':>7} {'wall ms':>8}")
    for number in range(1, args.rounds + 1):
        for name in SETTINGS:
            done = subprocess.run(
                [sys.executable, __file__, "--child", name, "--requests", str(args.requests)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode:
                raise SystemExit(f"{name}: exited {done.returncode}\n{done.stderr[-3000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            results[name].append(figures)
            print(f"{number:>5} {name:<13} {figures['cpu_ms']:>7.3f} {figures['wall_ms']:>8.3f}")
    floor = statistics.median(r["cpu_ms"] for r in results["floor"])
    authed = statistics.median(r["cpu_ms"] for r in results["floor-authed"])
    pairs = [a["cpu_ms"] - f["cpu_ms"] for f, a in zip(results["floor"], results["floor-authed"], strict=True)]
    print(
        f"median CPU per request in-process: floor {floor:.3f} ms, floor-authed {authed:.3f} ms;"
        f" the door {authed - floor:.3f} ms (per round {', '.join(f'{p:.3f}' for p in pairs)})"
    )


if __name__ == "__main__":
    main()
