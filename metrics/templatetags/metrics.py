"""Template filters of the metrics pages."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from metrics.charts import Chart, format_duration, format_share, render_chart

register = template.Library()


@register.filter
def seconds(value: float | None) -> str:
    """A duration in seconds as a person reads it: `45 s`, `12 min`, `3.5 h`; a dash for none."""
    return format_duration(value)


@register.filter
def share(value: float | None) -> str:
    return format_share(value)


@register.simple_tag
def chart(value: Chart) -> SafeString:
    """One chart: SVG with its legend and its figures as a table (metrics.charts)."""
    return render_chart(value)
