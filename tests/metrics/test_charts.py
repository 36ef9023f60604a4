"""The SVG charts: labelled axes, escaped labels, gaps where a bin has no sample."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from metrics.charts import BarSeries, LineSeries, bar_chart, line_chart, render_chart

HOUR = timedelta(hours=1)
STARTS = [datetime(2026, 11, 20, hour, tzinfo=UTC) for hour in range(10, 14)]


def test_labels_are_escaped_like_autoescape() -> None:
    chart = bar_chart(
        key="k", title="T <i>", caption="c", starts=STARTS, bin_size=HOUR,
        series=[BarSeries('<script>alert("x")</script>', [1, 0, 2, 0], "#000")], stacked=True,
    )
    svg = str(render_chart(chart))
    assert "<script>" not in svg and "<i>" not in svg
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in svg
    assert "T &lt;i&gt;" in svg


def test_a_bar_chart_has_axis_values_time_labels_and_totals() -> None:
    chart = bar_chart(
        key="k", title="t", caption="c", starts=STARTS, bin_size=HOUR,
        series=[BarSeries("A", [1, 0, 7, 0], "#000"), BarSeries("B", [2, 0, 1, 0], "#111")], stacked=True,
    )
    assert [tick.label for tick in chart.y_ticks] == ["0", "2", "4", "6", "8"]
    assert [tick.label for tick in chart.x_ticks][:2] == ["20 Nov 10:00", "11:00"]
    assert [label.label for label in chart.value_labels] == ["3", "8"]  # the stacked totals
    assert [(item.label, item.total) for item in chart.legend] == [("A", "8"), ("B", "3")]
    assert len(chart.rects) == 4


def test_a_line_breaks_where_a_bin_has_no_sample_and_the_reference_line_is_labelled() -> None:
    chart = line_chart(
        key="k", title="t", caption="c", starts=STARTS, bin_size=HOUR,
        series=[LineSeries("share", [0.5, 0.6, None, 0.95], "#000")], kind="share",
        reference=0.9, reference_label="0.90 target",
    )
    assert len(chart.polylines) == 1  # 10:00-11:00; 13:00 stands alone as a dot
    assert len(chart.dots) == 3
    assert chart.reference is not None and chart.reference.label == "0.90 target"
    assert [label.label for label in chart.value_labels] == ["0.95"]
    assert chart.table_rows[2] == ["20 Nov 12:00–13:00", "–"]


def test_durations_use_a_readable_unit() -> None:
    chart = line_chart(
        key="k", title="t", caption="c", starts=STARTS, bin_size=HOUR,
        series=[LineSeries("p95", [30.0, 5400.0, None, None], "#000")], kind="duration",
    )
    assert [tick.label for tick in chart.y_ticks] == ["0 min", "25 min", "50 min", "75 min", "100 min"]
    assert chart.table_rows[1] == ["20 Nov 11:00–12:00", "90 min"]
