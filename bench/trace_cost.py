"""What exporting spans costs in CPU per request, in-process (contract §13, issue 27 point 5).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_ingest CACHE_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/trace_cost.py [--requests 2000] [--rounds 4] [--target attempt|ingest]

Each round runs the target twice, each in a fresh process that calls Django's WSGI handler
directly (as bench/door_cost.py does) with a `traceparent` on every request: `off` without
OTEL_EXPORTER_OTLP_ENDPOINT, `on` with it pointed at an OTLP/HTTP receiver in this process (it
answers 200 and counts the spans). The CPU counted is the whole process's (time.process_time,
every thread: the BatchSpanProcessor's export thread included), and the `on` round ends with a
flush inside the measured window, so every span made was also encoded and sent. Printed: each
round, the medians, and the added CPU per request.

Needs the database bench/run leaves (or any migrated one), and CACHE_URL as bench/run gives the
app (redis://127.0.0.1:6379/9).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARM = 300
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def child(target: str, requests: int) -> None:
    """One round in this process: WARM requests, then `requests` measured; prints JSON."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from load import ENVELOPE, REF_MARK

    from telemetry import spans

    key = _api_key()
    application = WSGIHandler()
    template = json.dumps(ENVELOPE).encode()
    statuses: list[str] = []

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> None:
        statuses.append(status)

    def call() -> None:
        ref = f"bench-trace-{uuid.uuid4().hex}"
        if target == "ingest":
            path, body = "/api/v1/envelopes", template.replace(REF_MARK, ref.encode())
        else:
            fingerprint = uuid.uuid4().hex * 2
            path = f"/api/v1/steps/{ref}/attempts"
            body = json.dumps({"tool": "create_invoice", "input_fingerprint": fingerprint}).encode()
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1",
            "HTTP_AUTHORIZATION": f"Bearer {key}",
            "HTTP_TRACEPARENT": TRACEPARENT,
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
        }
        response = application(environ, start_response)
        b"".join(response)
        response.close()

    for _ in range(WARM):
        call()
    spans.flush()
    statuses.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(requests):
        call()
    spans.flush()  # every span of the window encoded and sent, inside it
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert set(statuses) == {"201 Created"}, set(statuses)
    print(json.dumps({"cpu_ms": 1000 * cpu / requests, "wall_ms": 1000 * wall / requests}))


def _api_key() -> str:
    from accounts.models import Team
    from accounts.services import api_key_create, team_create

    team = Team.objects.filter(slug="bench-trace").first() or team_create(slug="bench-trace")
    return api_key_create(team=team, name="trace").raw


class _Collector:
    """Answers every OTLP export 200 and counts the bytes (the spans are not decoded here)."""

    def __init__(self) -> None:
        self.received = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                collector.received += len(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--target", choices=["attempt", "ingest"], default="attempt")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests)
        return
    collector = _Collector()
    env = {**os.environ, "DEBUG": "false", "HOLDPOINT_HTTPS": "false", "ALLOWED_HOSTS": "127.0.0.1"}
    env.setdefault("SECRET_KEY", "bench-trace-key-not-a-secret-padded-to-fifty-characters")
    env.setdefault("HOLDPOINT_API_RATE", "1000000/s")
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    modes = {"off": env, "on": {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}}
    results: dict[str, list[float]] = {name: [] for name in modes}
    print(f"{'round':>5} {'spans':<5} {'cpu ms':>7} {'wall ms':>8}   ({args.target}, {args.requests} requests)")
    for number in range(1, args.rounds + 1):
        for name, mode_env in modes.items():
            done = subprocess.run(
                [sys.executable, __file__, "--child", args.target, "--requests", str(args.requests)],
                env=mode_env,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode:
                raise SystemExit(f"{name}: exited {done.returncode}\n{done.stderr[-3000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            results[name].append(figures["cpu_ms"])
            print(f"{number:>5} {name:<5} {figures['cpu_ms']:>7.3f} {figures['wall_ms']:>8.3f}")
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    pairs = [b - a for a, b in zip(results["off"], results["on"], strict=True)]
    print(
        f"median CPU per request: spans off {off:.3f} ms, on {on:.3f} ms; added {on - off:.3f} ms"
        f" (per round {', '.join(f'{p:.3f}' for p in pairs)}); the collector got {collector.received} bytes"
    )


if __name__ == "__main__":
    main()
