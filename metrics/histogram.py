"""Held-time histograms: p50/p95 from hourly rollups, at a stated resolution.

A held time of `s` seconds falls in bucket `floor(s + 0.5)` below 10 minutes (whole seconds,
so percentiles of short holds are exact to the second) and, from 10 minutes on, in a bucket
1 % wide: `600 + floor(ln((s + 0.5) / 600) / ln 1.01)`, reported as that bucket's midpoint,
within 0.5 % of any value in it. Histograms add up across hours, which exact sample lists
would not do at a flat cost.

Percentiles are nearest-rank: p50 of n samples is the value of the ceil(n / 2)-th smallest,
p95 the ceil(0.95 n)-th: always a value that some sample had (at the resolution above),
never an interpolation between two.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

from django.db.models import Case, ExpressionWrapper, F, FloatField, IntegerField, Value, When
from django.db.models.functions import Cast, Floor, Ln

LINEAR_LIMIT = 600  # seconds with a whole-second bucket each
RATIO = 1.01
_LN_RATIO = math.log(RATIO)

Histogram = Counter  # str(bucket) -> samples, as stored in JSON


def bucket_of(seconds: float) -> int:
    """The bucket of one held time (the SQL expression below computes the same)."""
    shifted = max(0.0, seconds) + 0.5
    if shifted < LINEAR_LIMIT:
        return math.floor(shifted)
    return LINEAR_LIMIT + math.floor(math.log(shifted / LINEAR_LIMIT) / _LN_RATIO)


def bucket_value(bucket: int) -> float:
    """The seconds a bucket stands for."""
    if bucket < LINEAR_LIMIT:
        return float(bucket)
    return float(round(LINEAR_LIMIT * RATIO ** (bucket - LINEAR_LIMIT + 0.5)))


def bucket_expression(field: str = "held_seconds") -> Case:
    """`bucket_of` in SQL, so the database groups samples instead of sending each one."""
    shifted = ExpressionWrapper(F(field) + Value(0.5), output_field=FloatField())
    logarithmic = Value(LINEAR_LIMIT) + Floor(
        ExpressionWrapper(
            Ln(ExpressionWrapper(shifted / Value(float(LINEAR_LIMIT)), output_field=FloatField()))
            / Value(_LN_RATIO),
            output_field=FloatField(),
        )
    )
    return Case(
        When(**{f"{field}__isnull": True}, then=Value(None)),
        When(**{f"{field}__lt": LINEAR_LIMIT - 0.5}, then=Cast(Floor(shifted), IntegerField())),
        default=Cast(logarithmic, IntegerField()),
        output_field=IntegerField(),
    )


def _numeric(item: tuple[str, int]) -> tuple[int, str]:
    return len(item[0]), item[0]


def percentiles(histogram: Mapping[str, int] | Mapping[int, int], *percents: int) -> list[float | None]:
    """Nearest-rank percentiles (each in 1..100) of {bucket: samples}; None without samples."""
    # Buckets are whole numbers (as strings in stored histograms): ordering by (length, text)
    # is numeric order without converting every key.
    counts = sorted(((str(bucket), n) for bucket, n in histogram.items() if n), key=_numeric)
    total = sum(n for _, n in counts)
    if total <= 0:
        return [None for _ in percents]
    answers: list[float | None] = []
    for percent in percents:
        rank = max(1, -(-percent * total // 100))  # ceil(percent * total / 100)
        seen = 0
        for bucket, n in counts:
            seen += n
            if seen >= rank:
                answers.append(bucket_value(int(bucket)))
                break
    return answers


def percentile(histogram: Mapping[str, int] | Mapping[int, int], percent: int) -> float | None:
    return percentiles(histogram, percent)[0]
