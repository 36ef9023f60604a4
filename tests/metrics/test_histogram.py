"""Held-time buckets and nearest-rank percentiles."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest

from accounts.models import Team
from envelopes.models import AuditEvent, Step, Tool
from metrics.histogram import Histogram, bucket_expression, bucket_of, bucket_value, percentile


@pytest.mark.parametrize(
    ("seconds", "bucket"),
    [(0, 0), (0.49, 0), (0.5, 1), (59.6, 60), (90, 90), (599.49, 599), (599.5, 600), (606.5, 601)],
)
def test_holds_below_ten_minutes_fall_in_whole_second_buckets(seconds, bucket) -> None:
    assert bucket_of(seconds) == bucket


@pytest.mark.parametrize("seconds", [600, 601, 1800, 3600, 7777, 86400, 30 * 86400])
def test_longer_holds_are_reported_within_half_a_percent(seconds) -> None:
    assert abs(bucket_value(bucket_of(seconds)) - seconds) <= 0.005 * seconds + 0.5


def from_samples(samples: Iterable[float]) -> Histogram:
    """These hold times as a histogram, each in the bucket the database puts it in."""
    return Counter(str(bucket_of(sample)) for sample in samples)


def test_nearest_rank_picks_a_sample_never_an_average() -> None:
    two = from_samples([10, 20])
    assert percentile(two, 50) == 10.0  # rank ceil(1.0) = 1, not 15
    assert percentile(two, 95) == 20.0  # rank ceil(1.9) = 2
    hundred = from_samples(range(1, 101))
    assert percentile(hundred, 50) == 50.0
    assert percentile(hundred, 95) == 95.0
    twenty = from_samples(range(1, 21))
    assert percentile(twenty, 95) == 19.0  # rank ceil(19.0) = 19
    assert percentile(from_samples([7]), 95) == 7.0


def test_no_samples_have_no_percentile() -> None:
    assert percentile(Counter(), 50) is None


@pytest.mark.django_db
def test_the_database_buckets_held_times_like_python(team: Team) -> None:
    tool = Tool.objects.create(team=team, name="t")
    step = Step.objects.create(team=team, tool=tool, operation_ref="s", state="in_progress", reason="attempt_granted")
    samples = [0.0, 0.4999, 0.5, 12.3, 599.4, 599.5, 600.0, 1234.5, 86400.0, 2_592_000.0]
    AuditEvent.objects.bulk_create(
        AuditEvent(team=team, tool=tool, step=step, chain="x", seq=n, kind="transition", held_seconds=value,
                   prev_hash="0", hash="0")
        for n, value in enumerate(samples, start=1)
    )
    in_sql = dict(
        AuditEvent.objects.annotate(bucket=bucket_expression()).values_list("held_seconds", "bucket")
    )
    assert in_sql == {value: bucket_of(value) for value in samples}
