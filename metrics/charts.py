"""Server-rendered SVG charts, readable without hovering: every chart has axis values, a
legend with the window's figure for each series, labelled values on the plot, and the same
figures as a table. This module computes the geometry and writes the SVG with presentation
attributes only (the CSP allows no inline styles or scripts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils.html import format_html
from django.utils.safestring import SafeString

WIDTH, HEIGHT = 640, 230
LEFT, RIGHT, TOP, BOTTOM = 60, 16, 18, 40
MAX_X_LABELS = 8
# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
OTHER = "#999999"


@dataclass(frozen=True)
class BarSeries:
    label: str
    values: Sequence[int]
    color: str
    total: str = ""  # the window's figure, shown in the legend


@dataclass(frozen=True)
class LineSeries:
    label: str
    values: Sequence[float | None]
    color: str
    dashed: bool = False
    total: str = ""


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    fill: str
    title: str


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    label: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Polyline:
    points: str
    stroke: str
    dashed: bool


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    fill: str
    title: str


@dataclass(frozen=True)
class LegendItem:
    label: str
    color: str
    total: str
    dashed: bool = False


@dataclass
class Chart:
    key: str
    title: str
    caption: str
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    y_ticks: list[Tick] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    rects: list[Rect] = field(default_factory=list)
    polylines: list[Polyline] = field(default_factory=list)
    dots: list[Dot] = field(default_factory=list)
    value_labels: list[Text] = field(default_factory=list)
    reference: Tick | None = None
    reference_y: float = 0.0
    legend: list[LegendItem] = field(default_factory=list)
    table_head: list[str] = field(default_factory=list)
    table_rows: list[list[str]] = field(default_factory=list)
    empty: bool = False

    @property
    def plot_width(self) -> int:
        return self.right - self.left

    @property
    def plot_height(self) -> int:
        return self.bottom - self.top

    @property
    def center_x(self) -> float:
        return (self.left + self.right) / 2

    @property
    def center_y(self) -> float:
        return (self.top + self.bottom) / 2

    @property
    def tick_end_y(self) -> int:
        return self.bottom + 4

    @property
    def caption_y(self) -> int:
        return self.height - 4

    @property
    def reference_label_y(self) -> float:
        return round(self.reference_y - 4, 1)

    @property
    def label_x(self) -> int:
        return self.left - 6

    @property
    def axis_label_y(self) -> int:
        return self.bottom + 16


# --- scales ------------------------------------------------------------------------------


def nice_step(rough: float) -> float:
    if rough <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(rough))
    for multiple in (1, 2, 5, 10):
        if multiple * magnitude >= rough:
            return multiple * magnitude
    return 10 * magnitude


def _scale(maximum: float, *, integer: bool, ticks: int = 4) -> tuple[float, float]:
    """(top of the axis, step between ticks)."""
    step = nice_step(maximum / ticks) if maximum > 0 else 1.0
    if integer:
        step = max(1.0, math.ceil(step))
    top = max(step, math.ceil(maximum / step) * step)
    return top, step


def format_count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


DURATION_UNITS = (("s", 1), ("min", 60), ("h", 3600), ("d", 86400))


def duration_unit(maximum: float) -> tuple[str, int]:
    if maximum < 120:
        return DURATION_UNITS[0]
    if maximum < 2 * 3600:
        return DURATION_UNITS[1]
    if maximum < 2 * 86400:
        return DURATION_UNITS[2]
    return DURATION_UNITS[3]


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    name, size = duration_unit(seconds)
    value = seconds / size
    return f"{value:.0f} {name}" if value >= 10 or float(value).is_integer() else f"{value:.1f} {name}"


def format_share(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _x_ticks(chart: Chart, starts: Sequence[datetime], bin_size: timedelta) -> None:
    slot = chart.plot_width / max(1, len(starts))
    every = max(1, math.ceil(len(starts) / MAX_X_LABELS))
    previous_day = None
    for index, start in enumerate(starts):
        if index % every:
            continue
        if bin_size >= timedelta(days=1):
            label = start.strftime("%d %b")
        elif previous_day != start.date() or bin_size > timedelta(hours=1):
            label = start.strftime("%d %b %H:%M")
        else:
            label = start.strftime("%H:%M")
        previous_day = start.date()
        chart.x_ticks.append(Tick(round(chart.left + slot * (index + 0.5), 1), label))


def bin_label(start: datetime, bin_size: timedelta) -> str:
    end = start + bin_size
    if bin_size >= timedelta(days=1):
        return start.strftime("%d %b")
    return f"{start:%d %b %H:%M}–{end:%H:%M}"


# --- bar charts ----------------------------------------------------------------------------


def bar_chart(
    *,
    key: str,
    title: str,
    caption: str,
    starts: Sequence[datetime],
    bin_size: timedelta,
    series: Sequence[BarSeries],
    stacked: bool,
) -> Chart:
    chart = Chart(key=key, title=title, caption=caption)
    count = len(starts)
    heights = [
        (sum(s.values[i] for s in series) if stacked else max((s.values[i] for s in series), default=0))
        for i in range(count)
    ]
    maximum = max(heights, default=0)
    chart.empty = maximum == 0
    top, step = _scale(maximum, integer=True)
    _y_ticks(chart, top, step, format_count)
    _x_ticks(chart, starts, bin_size)
    slot = chart.plot_width / max(1, count)
    bar_width = slot * 0.8
    for index, start in enumerate(starts):
        x0 = chart.left + slot * index + slot * 0.1
        base = 0
        for number, each in enumerate(series):
            value = each.values[index]
            if value <= 0:
                continue
            if stacked:
                x, width = x0, bar_width
                y_low, y_high = base, base + value
                base += value
            else:
                width = bar_width / len(series)
                x, y_low, y_high = x0 + width * number, 0, value
            y = _y(chart, y_high, top)
            chart.rects.append(
                Rect(
                    round(x, 1),
                    round(y, 1),
                    round(max(width - 0.5, 0.5), 1),
                    round(_y(chart, y_low, top) - y, 1),
                    each.color,
                    f"{each.label}, {bin_label(start, bin_size)}: {value}",
                )
            )
            if not stacked and count * len(series) <= 48:
                chart.value_labels.append(Text(round(x + width / 2, 1), round(y - 3, 1), format_count(value)))
        if stacked and heights[index] and count <= 48:
            label_y = round(_y(chart, heights[index], top) - 3, 1)
            chart.value_labels.append(Text(round(x0 + bar_width / 2, 1), label_y, format_count(heights[index])))
    chart.legend = [LegendItem(s.label, s.color, s.total or format_count(sum(s.values))) for s in series]
    chart.table_head = ["Time (UTC)", *[s.label for s in series]]
    chart.table_rows = [
        [bin_label(start, bin_size), *[format_count(s.values[i]) for s in series]] for i, start in enumerate(starts)
    ]
    return chart


# --- line charts ---------------------------------------------------------------------------


def line_chart(
    *,
    key: str,
    title: str,
    caption: str,
    starts: Sequence[datetime],
    bin_size: timedelta,
    series: Sequence[LineSeries],
    kind: str,  # duration | share
    reference: float | None = None,
    reference_label: str = "",
) -> Chart:
    chart = Chart(key=key, title=title, caption=caption)
    values = [v for s in series for v in s.values if v is not None]
    chart.empty = not values
    formatter: Callable[[float], str]
    if kind == "share":
        top, step = 1.0, 0.25
        formatter = format_share
    else:
        name, size = duration_unit(max(values, default=0))
        unit_top, unit_step = _scale(max(values, default=0) / size, integer=False)
        top, step = unit_top * size, unit_step * size

        def formatter(value: float) -> str:
            return f"{format_count(round(value / size, 2))} {name}"

    _y_ticks(chart, top, step, formatter)
    _x_ticks(chart, starts, bin_size)
    slot = chart.plot_width / max(1, len(starts))
    show = format_share if kind == "share" else format_duration
    for each in series:
        segment: list[str] = []
        last_point: tuple[float, float, float] | None = None
        for index, value in enumerate(each.values):
            if value is None:
                _flush(chart, segment, each)
                segment = []
                continue
            x, y = round(chart.left + slot * (index + 0.5), 1), round(_y(chart, value, top), 1)
            segment.append(f"{x},{y}")
            title = f"{each.label}, {bin_label(starts[index], bin_size)}: {show(value)}"
            chart.dots.append(Dot(x, y, each.color, title))
            last_point = (x, y, value)
        _flush(chart, segment, each)
        if last_point is not None:
            x, y, value = last_point
            chart.value_labels.append(Text(x, round(y - 6, 1), show(value)))
    if reference is not None:
        chart.reference = Tick(round(_y(chart, reference, top), 1), reference_label)
        chart.reference_y = chart.reference.position
    chart.legend = [LegendItem(s.label, s.color, s.total, s.dashed) for s in series]
    chart.table_head = ["Time (UTC)", *[s.label for s in series]]
    chart.table_rows = [
        [bin_label(start, bin_size), *[show(s.values[i]) for s in series]] for i, start in enumerate(starts)
    ]
    return chart


def _flush(chart: Chart, segment: list[str], series: LineSeries) -> None:
    if len(segment) > 1:
        chart.polylines.append(Polyline(" ".join(segment), series.color, series.dashed))


def _y(chart: Chart, value: float, top: float) -> float:
    return chart.bottom - (value / top) * chart.plot_height if top else chart.bottom


def _y_ticks(chart: Chart, top: float, step: float, formatter: Callable[[float], str]) -> None:
    value = 0.0
    while value <= top + step / 1000:
        chart.y_ticks.append(Tick(round(_y(chart, value, top), 1), formatter(value)))
        value += step


# --- SVG ---------------------------------------------------------------------------------------
# Written here rather than in a template: a chart is hundreds of elements, and rendering them
# with format_html is ten times faster than with template tags. Every value goes through
# format_html, so labels (error codes come from agents) are escaped as autoescape would.


def _join(parts: list[SafeString]) -> SafeString:
    return SafeString("".join(parts))  # each part is already escaped by format_html


def render_chart(chart: Chart) -> SafeString:
    parts: list[SafeString] = []
    for tick in chart.y_ticks:
        parts.append(format_html(
            '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#e2e2e2" stroke-width="1"/>'
            '<text x="{}" y="{}" text-anchor="end" dominant-baseline="middle" fill="#444">{}</text>',
            chart.left, chart.right, tick.position, tick.position, chart.label_x, tick.position, tick.label,
        ))
    parts.append(format_html(
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888" stroke-width="1"/>'
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888" stroke-width="1"/>',
        chart.left, chart.right, chart.bottom, chart.bottom, chart.left, chart.left, chart.top, chart.bottom,
    ))
    for tick in chart.x_ticks:
        parts.append(format_html(
            '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#888" stroke-width="1"/>'
            '<text x="{}" y="{}" text-anchor="middle" fill="#444">{}</text>',
            tick.position, tick.position, chart.bottom, chart.tick_end_y, tick.position, chart.axis_label_y, tick.label,
        ))
    for rect in chart.rects:
        parts.append(format_html(
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
            rect.x, rect.y, rect.width, rect.height, rect.fill, rect.title,
        ))
    if chart.reference is not None:
        parts.append(format_html(
            '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="6 4"/>'
            '<text x="{}" y="{}" text-anchor="end" fill="#B34700" font-weight="bold">{}</text>',
            chart.left, chart.right, chart.reference.position, chart.reference.position,
            chart.right, chart.reference_label_y, chart.reference.label,
        ))
    for line in chart.polylines:
        dash = format_html(' stroke-dasharray="{}"', "5 3") if line.dashed else ""
        parts.append(format_html(
            '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>', line.points, line.stroke, dash
        ))
    for dot in chart.dots:
        parts.append(format_html(
            '<circle cx="{}" cy="{}" r="3" fill="{}"><title>{}</title></circle>', dot.x, dot.y, dot.fill, dot.title
        ))
    for label in chart.value_labels:
        parts.append(format_html(
            '<text x="{}" y="{}" text-anchor="{}" fill="#222" font-size="9">{}</text>',
            label.x, label.y, label.anchor, label.label,
        ))
    if chart.empty:
        parts.append(format_html(
            '<text x="{}" y="{}" text-anchor="middle" fill="#666" font-size="13">{}</text>',
            chart.center_x, chart.center_y, "No data in this window",
        ))
    parts.append(format_html(
        '<text x="{}" y="{}" text-anchor="end" fill="#666">{}</text>', chart.right, chart.caption_y, "time (UTC)"
    ))
    legend = _join([
        format_html(
            '<li><svg width="18" height="10" aria-hidden="true">{}</svg> {}: <strong>{}</strong></li>',
            format_html(
                '<line x1="0" x2="18" y1="5" y2="5" stroke="{}" stroke-width="2" stroke-dasharray="5 3"/>', item.color
            ) if item.dashed else format_html('<rect width="18" height="10" fill="{}"/>', item.color),
            item.label,
            item.total,
        )
        for item in chart.legend
    ])
    head = _join([format_html('<th scope="col">{}</th>', cell) for cell in chart.table_head])
    rows = _join([
        format_html('<tr><th scope="row">{}</th>{}</tr>', first, _join([format_html("<td>{}</td>", c) for c in rest]))
        for first, *rest in chart.table_rows
    ])
    return format_html(
        '<figure class="chart" id="chart-{key}" aria-labelledby="chart-{key}-title">'
        '<figcaption><strong id="chart-{key}-title">{title}</strong><br><small class="muted">{caption}</small>'
        "</figcaption>"
        '<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-labelledby="chart-{key}-title" '
        'font-family="system-ui, -apple-system, sans-serif" font-size="11" class="chart-svg">{body}</svg>'
        '<ul class="chart-legend">{legend}</ul>'
        '<details class="chart-table"><summary>Figures as a table</summary><div class="overflow-auto"><table>'
        "<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div></details></figure>",
        key=chart.key, title=chart.title, caption=chart.caption, width=chart.width, height=chart.height,
        body=_join(parts), legend=legend, head=head, rows=rows,
    )
