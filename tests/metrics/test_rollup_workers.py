"""Rolling up with nothing to roll, and two workers rolling at once (real threads)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import Sum

from envelopes.models import Tool
from metrics.models import MetricsWatermark, ToolHour
from metrics.services import metrics_rollup
from tests.metrics.conftest import TOOL, Agent, U, at


@pytest.mark.django_db
def test_with_nothing_to_roll_the_watermark_starts_at_the_last_settled_hour(db) -> None:
    now = datetime(2026, 11, 20, 10, 7, tzinfo=UTC)
    assert metrics_rollup(now=now) == 0
    assert MetricsWatermark.objects.get().rolled_through == datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    assert not ToolHour.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_workers_rolling_at_once_write_each_hour_once(team) -> None:
    for n in range(20):
        Agent(team).ok(f"s{n}", at(n * 600))
    errors: list[Exception] = []

    def roll() -> None:
        try:
            metrics_rollup(now=U + timedelta(hours=3))
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=roll) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    tool = Tool.objects.get(team=team, name=TOOL)
    assert ToolHour.objects.filter(tool=tool).aggregate(n=Sum("envelopes"))["n"] == 20
    assert ToolHour.objects.filter(tool=tool).count() == 4  # 10:00 .. 13:00 (s18, s19 at 13:00)
