"""Each metric of contract §6 against the hand-computed scenario of conftest.py.

Every test runs twice: with nothing rolled up (all read from the indexes) and after the
hourly rollup ran (the window read from ToolHour rows, its edges live). Both must agree
with the figures written out here.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from envelopes.models import Tool
from metrics.queries import tool_metrics
from metrics.services import metrics_rollup
from tests.metrics.conftest import TOOL, S, U, at

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["live", "rolled"])
def metrics(request, scenario):  # type: ignore[no-untyped-def]
    if request.param == "rolled":
        assert metrics_rollup(now=U + timedelta(hours=2)) > 0
    tool = Tool.objects.get(team=scenario, name=TOOL)
    return lambda since=S, until=U: tool_metrics(tool, since, until)


def test_envelopes_are_counted_by_code_and_category_inside_the_window_only(metrics) -> None:
    answer = metrics()
    assert answer["tool"] == TOOL
    assert answer["since"] == "2026-11-20T10:00:00Z"
    assert answer["until"] == "2026-11-20T12:00:00Z"
    # A's success at S counts; N at S - 1 s and P at U do not; nor another tool or team.
    assert answer["envelopes"] == {
        "total": 14,
        "errors": 11,
        "successes": 3,
        "by_code": {
            "INVALID_RECIPIENT_ADDRESS": 2,
            "LATE_CODE": 1,
            "LEDGER_UNREACHABLE": 1,
            "MISSING_APPROVAL": 3,
            "OUTCOME_UNKNOWN": 2,
            "RATE_LIMITED": 2,
        },
        "by_category": {"authorization": 3, "dependency": 2, "internal": 1, "rate_limit": 2, "validation": 3},
    }


def test_documented_code_share_counts_team_wide_entries_as_documented(metrics) -> None:
    # Undocumented: C and J (RATE_LIMITED), M (LATE_CODE); OUTCOME_UNKNOWN is team-wide.
    assert metrics()["documented_code_share"] == pytest.approx(8 / 11)


def test_unknown_outcomes_and_their_resolution_by_verification(metrics) -> None:
    answer = metrics()
    assert answer["unknown_outcomes"] == 3  # D, E, and F's unreported attempt; not N (before S)
    assert answer["resolved_by_verification"] == 2  # D committed, E not_found; F unavailable is not


def test_duplicate_writes_prevented_counts_only_duplicate_refusals(metrics) -> None:
    # D refused twice (verifying, committed), F once (unreported attempt); G's approval_pending is not one.
    assert metrics()["duplicate_writes_prevented"] == 3


def test_pending_recovery_percentiles_are_nearest_rank_over_holds_that_ended_in_the_window(metrics) -> None:
    # 90 100 200 250 300 400 400 500 550: R entered before S and left exactly at S (counted),
    # Q left one second before S and L left exactly at U (neither counted).
    assert metrics()["pending_recovery_seconds"] == {"p50": 300.0, "p95": 550.0}


def test_escalations_count_each_step_entering_escalated_once(metrics) -> None:
    answer = metrics()
    assert answer["terminal_escalations"] == 3  # F, J, K; K's second reason is no new escalation; P at U
    assert answer["attempt_budget_exhausted"] == 1  # J


def test_approvals_and_their_decision_latency(metrics) -> None:
    assert metrics()["approvals"] == {
        "requested": 3,
        "approved": 1,
        "rejected": 1,
        "expired": 1,
        "latency_seconds": {"p50": 250.0, "p95": 500.0},  # the expiry is no decision
        "by": {"reviewer": 1, "rule": 0, "grant": 0},
    }


def test_attempts_per_step_is_the_mean_over_steps_active_in_the_window(metrics) -> None:
    # A1 R1 B1 C2 D1 E2 F1 G1 H0 I0 J0 K0 L0 M0: 14 steps, 10 attempts used by U. R and F are
    # in by an attempt alone; Q, N and P had nothing in the window; L's attempt at U is after it.
    assert metrics()["attempts_per_step"] == pytest.approx(10 / 14)


def test_a_step_active_in_two_hours_of_the_window_counts_once_with_its_latest_attempts(metrics) -> None:
    # One hour more: P (0 attempts) joins, and L (11:56 and 12:00) counts once, with 1.
    assert metrics(S, U + timedelta(hours=1))["attempts_per_step"] == pytest.approx(11 / 15)


def test_redactions_and_suspicious_text_count_flagged_envelopes(metrics) -> None:
    answer = metrics()
    assert answer["redactions"] == 1  # B; N (flagged too) arrived before S
    assert answer["suspicious_text"] == 1  # D


def test_a_window_inside_the_hour_counts_from_since_up_to_but_not_including_until(metrics) -> None:
    answer = metrics(at(1000), at(2400))
    assert answer["envelopes"]["total"] == 2  # D and E
    assert answer["unknown_outcomes"] == 2
    assert answer["resolved_by_verification"] == 1  # E's, at exactly until, is not in
    assert answer["duplicate_writes_prevented"] == 2
    assert answer["pending_recovery_seconds"] == {"p50": 300.0, "p95": 300.0}
    assert answer["attempts_per_step"] == pytest.approx(1.0)  # D 1; E 1 by then (its second at S + 2500 s)
    assert answer["documented_code_share"] == 1.0
    assert answer["approvals"]["latency_seconds"] == {"p50": None, "p95": None}


def test_a_window_starting_mid_hour_joins_the_rolled_hour_and_the_live_edge(metrics) -> None:
    answer = metrics(at(1800), U)
    assert answer["envelopes"]["errors"] == 8  # E G H I J K L M
    assert answer["envelopes"]["successes"] == 0
    assert answer["pending_recovery_seconds"] == {"p50": 400.0, "p95": 550.0}  # 200 250 400 500 550
    assert answer["unknown_outcomes"] == 2  # E, F


def test_an_empty_window_has_zero_counts_and_null_shares_and_percentiles(metrics) -> None:
    answer = metrics(U + timedelta(hours=5), U + timedelta(hours=6))
    assert answer["envelopes"] == {"total": 0, "errors": 0, "successes": 0, "by_code": {}, "by_category": {}}
    assert answer["documented_code_share"] is None
    assert answer["attempts_per_step"] is None
    assert answer["pending_recovery_seconds"] == {"p50": None, "p95": None}
    assert answer["approvals"]["latency_seconds"] == {"p50": None, "p95": None}
