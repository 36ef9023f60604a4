"""The Celery worker under sustained load: its memory over time, and that the work gets done.

    .venv/bin/python bench/worker_soak.py [--duration 120] [--rate 40]

Makes a fresh PostgreSQL database `hp_bench_worker`, a team with a webhook endpoint on a local
sink that answers 200, and starts a real `celery -A config worker --beat --concurrency 2` on
Redis (databases 12 and 13), with the sweep every second. Then, for `--duration` seconds, it
ingests `--rate` envelopes a second (seed 000's rate-limit error: each step waits 2 s, so the
worker's sweep fires its timer; each ingest and each timer queues a webhook the worker
delivers). Every second it samples VmRSS of the worker's processes (the main process, the
beat thread lives in it, and the pool children).

Prints: envelopes sent, timers fired, webhooks delivered (and still pending), how long the
backlog took to drain, and per process the peak RSS, the mean of the first vs the last quarter,
and a timeline. Exits non-zero if a timer or a webhook was left behind `--drain` seconds
(default 120) after the load stopped.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")
DB_NAME = "hp_bench_worker"
ENV = {
    "DATABASE_URL": f"{PG_URL}/{DB_NAME}",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/12",
    "CACHE_URL": "redis://127.0.0.1:6379/13",
    "DEBUG": "false",
    "SECRET_KEY": "holdpoint-bench-key-not-a-secret-padded-to-fifty-chars",
    "HOLDPOINT_HTTPS": "false",
    "HOLDPOINT_SWEEP_SECONDS": "1",
    "HOLDPOINT_WEBHOOK_ALLOW_PRIVATE": "true",
    "DJANGO_SETTINGS_MODULE": "config.settings",
}
os.environ.update(ENV)

from bench.load import process_tree, rss_kb  # noqa: E402


class Sink(BaseHTTPRequestHandler):
    received = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with Sink.lock:
            Sink.received += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def fresh_database() -> None:
    import psycopg

    with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{DB_NAME}"')
    import redis

    for db in (12, 13):
        redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()


def main(args: argparse.Namespace) -> int:
    fresh_database()
    import django

    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    from accounts.services import team_create
    from envelopes.models import Step
    from envelopes.services import envelope_ingest
    from webhooks.models import OutboxMessage
    from webhooks.services import endpoint_create

    call_command("migrate", verbosity=0)
    team = team_create(slug="bench-worker")
    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint_create(team=team, url=f"http://127.0.0.1:{sink.server_address[1]}/hook")

    log = open(ROOT / "var" / "bench-worker.log", "wb")  # noqa: SIM115 (open for the worker's life)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--beat", "--concurrency", "2",
         "--loglevel", "warning"],
        cwd=ROOT, env={**os.environ, **ENV}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    samples: dict[int, list[tuple[float, float]]] = {}
    start = time.monotonic()
    sent = 0
    try:
        time.sleep(3)  # the worker's start-up
        deadline = start + 3 + args.duration
        next_sample = time.monotonic()
        while time.monotonic() < deadline:
            tick = time.monotonic()
            for _ in range(args.rate):
                now = timezone.now()
                payload = {
                    "ok": False, "code": "RATE_LIMITED", "category": "rate_limit", "commit_state": "not_committed",
                    "retry": {"directive": "after_delay", "not_before": (now + timedelta(seconds=2)).isoformat(),
                              "max_attempts_remaining": 2},
                    "next_action": "wait_and_retry", "scope": "request", "tool": "search_orders",
                    "operation_ref": f"bench/worker/{uuid.uuid4().hex}", "safe_details": {},
                    "agent_message": "Rate limited; retry after the window.",
                }
                envelope_ingest(team=team, payload=payload, dialect="canonical", raw_body=b"{}")
                sent += 1
            if time.monotonic() >= next_sample:
                for pid in process_tree(worker.pid):
                    kb = rss_kb(pid)
                    if kb:
                        samples.setdefault(pid, []).append((time.monotonic() - start, kb / 1024))
                next_sample += 1.0
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        load_stopped = time.monotonic()
        waited = 0.0
        while waited < args.drain and (
            Step.objects.filter(state="waiting_retry").exists()
            or OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING).exists()
        ):
            time.sleep(1)
            waited += 1
        drained_in = time.monotonic() - load_stopped
        fired = Step.objects.filter(state="retry_ready").count()
        left_waiting = Step.objects.filter(state="waiting_retry").count()
        delivered = OutboxMessage.objects.filter(status=OutboxMessage.Status.DELIVERED).count()
        pending = OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING).count()
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        sink.shutdown()
        log.close()

    print(f"{args.duration} s at {args.rate} envelopes/s: {sent} envelopes")
    print(f"timers fired by the worker's sweep: {fired} (still waiting after the load: {left_waiting})")
    print(f"webhooks delivered: {delivered} (sink received {Sink.received}; still pending: {pending})")
    print(f"backlog drained {drained_in:.0f} s after the load stopped (waited up to {args.drain} s)")
    print("\nworker RSS per process (MB): peak, first-quarter mean -> last-quarter mean")
    for pid, series in sorted(samples.items()):
        values = [mb for _, mb in series]
        quarter = max(1, len(values) // 4)
        first, last = sum(values[:quarter]) / quarter, sum(values[-quarter:]) / quarter
        role = "main" if pid == worker.pid else "child"
        print(f"  {role:5} pid {pid:7}  peak {max(values):6.1f}   {first:6.1f} -> {last:6.1f} ({last - first:+.1f})")
    print("\ntimeline (s: MB per process)")
    steps = max(1, len(next(iter(samples.values()), [])) // 12)
    for index in range(0, max(len(s) for s in samples.values()), steps):
        cells = [f"{series[index][1]:6.1f}" for _, series in sorted(samples.items()) if index < len(series)]
        moment = next(series[index][0] for series in samples.values() if index < len(series))
        print(f"  {moment:6.0f}  " + "  ".join(cells))
    return 0 if left_waiting == 0 and pending == 0 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=120, help="seconds of load (default 120)")
    parser.add_argument("--rate", type=int, default=40, help="envelopes per second (default 40)")
    parser.add_argument("--drain", type=int, default=120, help="seconds to wait for the backlog after the load")
    sys.exit(main(parser.parse_args()))
