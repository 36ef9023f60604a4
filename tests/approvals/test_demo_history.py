"""`python manage.py demo` in a fresh process leaves a week of history behind it: each of the
last seven days has traffic on every demo tool, so the tool pages' and the overview's charts
open full, read through the metrics API with the key the command printed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from metrics.models import ToolDay, ToolHour
from tests import worker
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db(transaction=True)


def _demo() -> tuple[str, float]:
    env = {**os.environ, "DATABASE_URL": worker.test_database_url(), "DJANGO_SETTINGS_MODULE": "config.settings"}
    env.pop("HOLDPOINT_PASSWORD", None)
    env.setdefault("SECRET_KEY", "holdpoint-test-demo-history-key-not-a-secret-padded-to-fifty")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "manage.py", "demo"],
        cwd=worker.ROOT,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1], time.monotonic() - started


def _metrics(agent: AgentClient, tool: str, since: object, until: object) -> dict:
    response = agent.get(f"/api/v1/tools/{tool}/metrics", {"since": since.isoformat(), "until": until.isoformat()})  # type: ignore[attr-defined]
    assert response.status_code == 200, response.content
    return response.json()


def test_the_demo_leaves_a_week_of_history_on_every_chart() -> None:
    key, seconds = _demo()
    assert seconds < 120  # scripts/run loads it on a newcomer's first start
    agent = AgentClient(key)
    now = timezone.now()

    for days_ago in range(1, 8):
        since, until = now - timedelta(days=days_ago), now - timedelta(days=days_ago - 1)
        for tool in ("send_email", "create_invoice", "refund"):
            assert _metrics(agent, tool, since, until)["envelopes"]["total"] > 0, (tool, days_ago)

    week = now - timedelta(days=7), now
    email = _metrics(agent, "send_email", *week)
    assert {"INVALID_RECIPIENT_ADDRESS", "RATE_LIMITED"} <= set(email["envelopes"]["by_code"])
    invoice = _metrics(agent, "create_invoice", *week)
    assert invoice["unknown_outcomes"] > 0 and invoice["resolved_by_verification"] > 0
    refund = _metrics(agent, "refund", *week)["approvals"]
    assert refund["requested"] > 0 and refund["approved"] > 0 and refund["rejected"] > 0
    assert refund["latency_seconds"]["p50"] is not None

    # Read from the rollups, as a window over a week always is: the rows are there.
    assert ToolDay.objects.count() >= 6 * 3
    assert ToolHour.objects.filter(hour__lt=now - timedelta(days=6)).exists()
