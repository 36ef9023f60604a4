"""Server-rendered SVG charts, readable without hovering: every chart has axis values, a
legend with the window's figure for each series, labelled values on the plot, and the same
figures as a table. This module computes the geometry and writes the SVG with presentation
attributes only (the CSP allows no inline styles or scripts).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

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


def nice_step(rough: float, *, integer: bool = False) -> float:
    if rough <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(rough))
    for multiple in (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10):
        if multiple * magnitude >= rough:
            return multiple * magnitude
    return 10 * magnitude


def _scale(maximum: float, *, integer: bool, ticks: int = 4) -> tuple[float, float]:
    """(top of the axis, step between ticks)."""
    step = nice_step(maximum / ticks, integer=integer) if maximum > 0 else 1.0
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
    labels = [bin_label(start, bin_size) for start in starts]
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
    for index in range(count):
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
                    f"{each.label}, {labels[index]}: {value}",
                )
            )
            if not stacked and _fits(format_count(value), width):
                chart.value_labels.append(Text(round(x + width / 2, 1), round(y - 3, 1), format_count(value)))
        if stacked and heights[index] and _fits(format_count(maximum), slot):
            label_y = round(_y(chart, heights[index], top) - 3, 1)
            chart.value_labels.append(Text(round(x0 + bar_width / 2, 1), label_y, format_count(heights[index])))
    chart.legend = [LegendItem(s.label, s.color, s.total or format_count(sum(s.values))) for s in series]
    chart.table_head = ["Time (UTC)", *[s.label for s in series]]
    chart.table_rows = [
        [labels[i], *[format_count(s.values[i]) for s in series]] for i in range(count)
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
    labels = [bin_label(start, bin_size) for start in starts]
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
            title = f"{each.label}, {labels[index]}: {show(value)}"
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
        [labels[i], *[show(s.values[i]) for s in series]] for i in range(len(starts))
    ]
    return chart


def _fits(label: str, width: float) -> bool:
    """A value label is drawn only where it fits above its bar (9px digits are ~5.5px wide);
    otherwise the axis, the legend and the table carry the figures."""
    return len(label) * 5.5 <= width + 2


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
# Written here rather than in a template: a chart is hundreds of elements, and tags or even
# format_html cost more than the rest of the page. Every value goes through `_e`, the same
# escaping as autoescape (labels include error codes, which come from agents).


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def render_chart(chart: Chart) -> SafeString:
    left, right, top, bottom = chart.left, chart.right, chart.top, chart.bottom
    out: list[str] = []
    add = out.append
    for tick in chart.y_ticks:
        y = tick.position
        add(f'<line x1="{left}" x2="{right}" y1="{y}" y2="{y}" stroke="#e2e2e2" stroke-width="1"/>'
            f'<text x="{chart.label_x}" y="{y}" text-anchor="end" dominant-baseline="middle" fill="#444">'
            f"{_e(tick.label)}</text>")
    add(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#888" stroke-width="1"/>'
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}" stroke="#888" stroke-width="1"/>')
    for tick in chart.x_ticks:
        x = tick.position
        add(f'<line x1="{x}" x2="{x}" y1="{bottom}" y2="{chart.tick_end_y}" stroke="#888" stroke-width="1"/>'
            f'<text x="{x}" y="{chart.axis_label_y}" text-anchor="middle" fill="#444">{_e(tick.label)}</text>')
    for rect in chart.rects:
        add(f'<rect x="{rect.x}" y="{rect.y}" width="{rect.width}" height="{rect.height}" fill="{_e(rect.fill)}">'
            f"<title>{_e(rect.title)}</title></rect>")
    if chart.reference is not None:
        y = chart.reference.position
        add(f'<line x1="{left}" x2="{right}" y1="{y}" y2="{y}" stroke="#D55E00" stroke-width="1.5" '
            f'stroke-dasharray="6 4"/><text x="{left + 4}" y="{chart.reference_label_y}" text-anchor="start" '
            f'fill="#B34700" font-weight="bold">{_e(chart.reference.label)}</text>')
    for line in chart.polylines:
        dash = ' stroke-dasharray="5 3"' if line.dashed else ""
        add(f'<polyline points="{_e(line.points)}" fill="none" stroke="{_e(line.stroke)}" stroke-width="2"{dash}/>')
    for dot in chart.dots:
        add(f'<circle cx="{dot.x}" cy="{dot.y}" r="3" fill="{_e(dot.fill)}"><title>{_e(dot.title)}</title></circle>')
    for label in chart.value_labels:
        add(f'<text x="{label.x}" y="{label.y}" text-anchor="{_e(label.anchor)}" fill="#222" font-size="9">'
            f"{_e(label.label)}</text>")
    if chart.empty:
        add(f'<text x="{chart.center_x}" y="{chart.center_y}" text-anchor="middle" fill="#666" font-size="13">'
            "No data in this window</text>")
    add(f'<text x="{right}" y="{chart.caption_y}" text-anchor="end" fill="#666">time (UTC)</text>')
    legend = "".join(
        '<li><svg width="18" height="10" aria-hidden="true">'
        + (
            f'<line x1="0" x2="18" y1="5" y2="5" stroke="{_e(item.color)}" stroke-width="2" stroke-dasharray="5 3"/>'
            if item.dashed
            else f'<rect width="18" height="10" fill="{_e(item.color)}"/>'
        )
        + f"</svg> {_e(item.label)}: <strong>{_e(item.total)}</strong></li>"
        for item in chart.legend
    )
    head = "".join(f'<th scope="col">{_e(cell)}</th>' for cell in chart.table_head)
    rows = "".join(
        f'<tr><th scope="row">{_e(first)}</th>' + "".join(f"<td>{_e(cell)}</td>" for cell in rest) + "</tr>"
        for first, *rest in chart.table_rows
    )
    key = _e(chart.key)
    return SafeString(  # every value above went through _e
        f'<figure class="chart" id="chart-{key}" aria-labelledby="chart-{key}-title">'
        f'<figcaption><strong id="chart-{key}-title">{_e(chart.title)}</strong><br>'
        f'<small class="muted">{_e(chart.caption)}</small></figcaption>'
        f'<svg viewBox="0 0 {chart.width} {chart.height}" width="100%" role="img" '
        f'aria-labelledby="chart-{key}-title" font-family="system-ui, -apple-system, sans-serif" font-size="11" '
        f'class="chart-svg">{"".join(out)}</svg>'
        f'<ul class="chart-legend">{legend}</ul>'
        '<details class="chart-table"><summary>Figures as a table</summary><div class="overflow-auto"><table>'
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div></details></figure>"
    )
