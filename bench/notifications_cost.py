"""Issue 12, point 7: what notification channels cost the ingest (and what the event stream
costs over v1's direct webhook outbox), measured in one process, the three targets alternating
request by request on PostgreSQL so that a noisy machine weighs on all of them alike.

Each request is a new step asking for approval: the worst case, every request writes a notice
for every channel. "three" is a team with an email, a Slack and a webhook channel, "none" a team
without channels, "v1" the same ingest with the core calling webhooks.outbox.event_emit as it
did before envelopes/events.py (no DomainEvent, no consumers). Nothing is sent in the request.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hp_bench_notify SECRET_KEY=... \\
        .venv/bin/python bench/notifications_cost.py        # N=1000 requests per target
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402 (after django.setup())
from django.core.cache import cache  # noqa: E402 (after django.setup())
from django.core.management import call_command  # noqa: E402 (after django.setup())
from rest_framework.test import APIClient  # noqa: E402 (after django.setup())

from accounts.services import api_key_create, team_create  # noqa: E402 (after django.setup())
from envelopes import events, transitions  # noqa: E402 (after django.setup())
from envelopes.services import circuits  # noqa: E402 (after django.setup())
from notifications.services import channel_create, channels_flush  # noqa: E402 (after django.setup())
from webhooks import outbox  # noqa: E402 (after django.setup())


def client_for(slug: str) -> tuple[Any, APIClient]:
    team = team_create(slug=slug)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer " + api_key_create(team=team, name="bench").raw)
    return team, client


def body(ref: str) -> str:
    return json.dumps(
        {
            "ok": False,
            "tool": "charge_card",
            "operation_ref": ref,
            "code": "AMOUNT_OVER_LIMIT",
            "category": "authorization",
            "commit_state": "not_committed",
            "retry": {"directive": "never", "max_attempts_remaining": 0},
            "next_action": "request_approval",
            "safe_details": {"limit": "1000"},
        }
    )


def emit_with(emit: Any) -> None:
    circuits.event_emit = emit  # type: ignore[attr-defined]
    transitions.event_emit = emit  # type: ignore[attr-defined]


def post(client: APIClient, ref: str) -> float:
    started = time.perf_counter()
    answer = client.generic("POST", "/api/v1/envelopes", body(ref), content_type="application/json")
    assert answer.status_code == 201, answer.content
    return time.perf_counter() - started


def main() -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    settings.ALLOWED_HOSTS = ["*"]
    settings.SECURE_SSL_REDIRECT = False
    call_command("migrate", verbosity=0)
    run = str(int(time.time()))
    _, none = client_for(f"bench-none-{run}")
    three_team, three = client_for(f"bench-three-{run}")
    channel_create(team=three_team, kind="email", target="ops@example.com")
    channel_create(team=three_team, kind="slack", target="http://127.0.0.1:9/services/T/B/X")
    channel_create(team=three_team, kind="webhook", target="http://127.0.0.1:9/hook")
    _, v1 = client_for(f"bench-v1-{run}")
    results: dict[str, list[float]] = {"v1 (no event stream)": [], "none": [], "three": []}
    for client in (none, three, v1):
        post(client, "warm")
    for i in range(int(os.environ.get("N", "1000"))):
        if i % 100 == 0:
            cache.clear()  # throttle counts
            channels_flush()  # what the worker does: opens the batching window
        emit_with(outbox.event_emit)
        results["v1 (no event stream)"].append(post(v1, f"i{i}"))
        emit_with(events.event_emit)
        results["none"].append(post(none, f"i{i}"))
        results["three"].append(post(three, f"i{i}"))
    for name, times in results.items():
        times.sort()
        print(
            f"{name:22} n={len(times)} mean={statistics.mean(times) * 1000:.2f} ms "
            f"median={statistics.median(times) * 1000:.2f} ms p95={times[int(len(times) * 0.95)] * 1000:.2f} ms"
        )
    median = {name: statistics.median(times) for name, times in results.items()}
    print(
        f"three vs none: {100 * (median['three'] / median['none'] - 1):+.1f} %   "
        f"none vs v1: {100 * (median['none'] / median['v1 (no event stream)'] - 1):+.1f} %"
    )


if __name__ == "__main__":
    main()
