"""Template filters of the metrics pages."""

from __future__ import annotations

from django import template

from metrics.charts import format_duration, format_share

register = template.Library()


@register.filter
def seconds(value: float | None) -> str:
    """A duration in seconds as a person reads it: `45 s`, `12 min`, `3.5 h`; a dash for none."""
    return format_duration(value)


@register.filter
def share(value: float | None) -> str:
    return format_share(value)
