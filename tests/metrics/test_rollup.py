"""The hourly rollups: idempotent, settled, and complete once rolled again after a backfill."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum

from envelopes.models import Envelope, Tool
from metrics.models import COUNTERS, MetricsWatermark, ToolDay, ToolHour, ToolTotal
from metrics.queries import tool_metrics
from metrics.services import metrics_rollup, watermark
from tests.metrics.conftest import TOOL, Agent, S, U, at

pytestmark = pytest.mark.django_db


def rows() -> list[tuple]:
    fields = ("tool_id", "hour", *COUNTERS, "by_code", "recovery_histogram")
    return list(ToolHour.objects.order_by("tool_id", "hour").values_list(*fields))


def test_rolling_twice_changes_nothing(scenario) -> None:
    assert metrics_rollup(now=U + timedelta(hours=2)) == 4  # 09:00 (Q's first row) up to 13:00
    first, totals = rows(), list(ToolTotal.objects.values_list("tool_id", *COUNTERS).order_by("tool_id"))
    assert metrics_rollup(now=U + timedelta(hours=2)) == 0
    assert metrics_rollup(now=U + timedelta(hours=2), rebuild_from=S) == 3
    assert rows() == first
    assert list(ToolTotal.objects.values_list("tool_id", *COUNTERS).order_by("tool_id")) == totals


def test_an_hour_is_rolled_only_five_minutes_after_it_closed(scenario) -> None:
    metrics_rollup(now=U + timedelta(minutes=4, seconds=59))
    assert watermark()[0] == U - timedelta(hours=1)
    metrics_rollup(now=U + timedelta(minutes=5))
    assert watermark()[0] == U


def test_hours_hold_what_happened_in_them(scenario) -> None:
    metrics_rollup(now=U + timedelta(hours=2))
    tool = Tool.objects.get(team=scenario, name=TOOL)
    by_hour = {row.hour: row for row in ToolHour.objects.filter(tool=tool)}
    assert sorted(by_hour) == [S - timedelta(hours=1), S, S + timedelta(hours=1), U]
    ten, eleven, noon = by_hour[S], by_hour[S + timedelta(hours=1)], by_hour[U]
    nine = by_hour[S - timedelta(hours=1)]
    assert (nine.envelopes, nine.errors) == (3, 3)  # Q, R, N
    assert (ten.envelopes, ten.errors, ten.successes) == (7, 4, 3)  # A, B twice, C twice, D, E
    assert ten.by_code == {"INVALID_RECIPIENT_ADDRESS": 1, "RATE_LIMITED": 1, "OUTCOME_UNKNOWN": 2}
    # R 400 (at S), B 90, C 100, D 300, E 400, F 200: whole-second buckets
    assert ten.recovery_histogram == {"90": 1, "100": 1, "200": 1, "300": 1, "400": 2}
    approvals = (eleven.approvals_requested, eleven.approvals_approved, eleven.approvals_rejected)
    assert (*approvals, eleven.approvals_expired) == (3, 1, 1, 1)
    assert (noon.envelopes, noon.terminal_escalations) == (1, 1)  # P, exactly at U


def test_totals_are_the_sum_of_the_hours(scenario) -> None:
    metrics_rollup(now=U + timedelta(hours=2))
    tool = Tool.objects.get(team=scenario, name=TOOL)
    total = ToolTotal.objects.get(tool=tool)
    summed = ToolHour.objects.filter(tool=tool).aggregate(**{name: Sum(name) for name in COUNTERS})
    assert {name: getattr(total, name) for name in COUNTERS} == summed
    assert total.envelopes == 18 == Envelope.objects.filter(tool=tool).count()


def test_a_row_stamped_into_a_rolled_hour_counts_once_that_hour_is_rolled_again(scenario) -> None:
    metrics_rollup(now=U + timedelta(hours=2))
    tool = Tool.objects.get(team=scenario, name=TOOL)
    Agent(scenario).ok("late", at(30))  # a backfill into 10:00, already rolled
    assert tool_metrics(tool, S, U)["envelopes"]["successes"] == 3
    metrics_rollup(now=U + timedelta(hours=2), rebuild_from=S)
    assert tool_metrics(tool, S, U)["envelopes"]["successes"] == 4


def test_a_window_of_whole_days_reads_the_day_rows_and_agrees_with_the_live_answer(scenario) -> None:
    tool = Tool.objects.get(team=scenario, name=TOOL)
    since, until = S - timedelta(hours=22), S + timedelta(hours=14, minutes=30)  # 11-19 12:00 .. 11-21 00:30
    live = tool_metrics(tool, since, until)
    metrics_rollup(now=until + timedelta(hours=1))
    day = ToolDay.objects.get(tool=tool)
    assert day.day == S.replace(hour=0)
    assert (day.envelopes, day.terminal_escalations) == (18, 4)
    assert tool_metrics(tool, since, until) == live
    assert live["envelopes"]["total"] == 18
    # Q1 R1 N0 A1 B1 C2 D1 E2 F1 G1 H0 I0 J0 K0 L1 M0 P0: 17 steps, 12 attempts
    assert live["attempts_per_step"] == pytest.approx(12 / 17)


def test_the_current_hour_is_rolled_provisionally_and_replaced_once_it_closes(scenario) -> None:
    tool = Tool.objects.get(team=scenario, name=TOOL)
    now = S + timedelta(hours=1, minutes=30)  # 11:30: 10:00 closed, 11:00 under way
    live = tool_metrics(tool, S, now)
    metrics_rollup(now=now)
    assert watermark() == (S + timedelta(hours=1), now - timedelta(minutes=1))
    provisional = ToolHour.objects.get(tool=tool, hour=S + timedelta(hours=1))
    assert provisional.partial_through == now - timedelta(minutes=1)
    assert provisional.envelopes == 5  # G 11:00, H 11:06, I 11:10, J 11:23, K 11:25
    assert tool_metrics(tool, S, now) == live
    metrics_rollup(now=U + timedelta(minutes=5))
    final = ToolHour.objects.get(tool=tool, hour=S + timedelta(hours=1))
    assert (final.partial_through, final.envelopes) == (None, 7)


def test_a_provisional_row_replaced_while_it_was_read_is_not_counted_twice(scenario) -> None:
    tool = Tool.objects.get(team=scenario, name=TOOL)
    now = S + timedelta(hours=1, minutes=30)
    live = tool_metrics(tool, S, now)
    metrics_rollup(now=now)
    seen = watermark()
    # The hour closes and is rolled for good between a reader's watermark read and its row read:
    # the row now also counts L (11:56) and M (11:59), after the window.
    metrics_rollup(now=U + timedelta(minutes=5))
    MetricsWatermark.objects.update(rolled_through=seen[0], partial_through=seen[1])
    assert tool_metrics(tool, S, now) == live
