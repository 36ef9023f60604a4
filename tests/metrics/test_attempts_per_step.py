"""attempts_per_step over a window that starts mid-hour: each active step once, with the
attempts it had used by the window's end, whether the window is read live or from rollups."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from envelopes.models import Tool
from metrics.queries import tool_metrics
from metrics.services import metrics_rollup
from tests.conftest import error_envelope
from tests.metrics.conftest import Agent

pytestmark = pytest.mark.django_db

HALF_PAST_TEN = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)
NOON = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def clock(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, 20, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def steps(team):  # type: ignore[no-untyped-def]
    agent = Agent(team, tool="t")
    # X: active before the window (10:20, 10:21) and inside it (11:10): once, with 2.
    agent.attempt("X", clock(10, 20))
    agent.error("X", clock(10, 21))
    agent.attempt("X", clock(11, 10), input_="v2")
    # Y: active in the window's ragged first half hour (10:40) and at 11:10, when its envelope
    # reports attempt 3: once, with 3.
    agent.attempt("Y", clock(10, 40))
    agent.envelope(error_envelope(operation_ref="Y", attempt=3), clock(11, 10))
    # Z: granted at 09:00, its envelope at 10:45: once, with 1.
    agent.attempt("Z", clock(9, 0))
    agent.ok("Z", clock(10, 45))
    # W: granted one second before noon; an envelope at noon reports attempt 5, after the window.
    agent.attempt("W", clock(11, 59, 59))
    agent.envelope(error_envelope(operation_ref="W", attempt=5), NOON)
    return Tool.objects.get(team=team, name="t")


@pytest.mark.parametrize("rolled", [False, True])
def test_each_step_counts_once_with_the_attempts_it_used_by_the_end_of_the_window(steps, rolled) -> None:
    if rolled:
        metrics_rollup(now=NOON + timedelta(hours=2))
    answer = tool_metrics(steps, HALF_PAST_TEN, NOON)
    assert answer["attempts_per_step"] == pytest.approx((2 + 3 + 1 + 1) / 4)
    # From 11:00 only: X 2, Y 3, W 1 (Z was last active at 10:45).
    assert tool_metrics(steps, clock(11, 0), NOON)["attempts_per_step"] == pytest.approx(2)
    # Until 11:00 only: X had not yet been active in it, Y had 1, Z 1.
    assert tool_metrics(steps, HALF_PAST_TEN, clock(11, 0))["attempts_per_step"] == pytest.approx(1)
