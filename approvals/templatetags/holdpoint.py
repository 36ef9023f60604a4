"""Template helpers of the dashboard: times shown relative and absolute, states, nav counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from approvals import for_you, queries
from approvals.explain import policy_explained
from dashboard.once import url_host
from dashboard.shell import memberships_of, teams_of
from envelopes.rfc3339 import parse_rfc3339, rfc3339

register = template.Library()


def _span(delta: timedelta) -> str:
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def relative(value: datetime, now: datetime | None = None) -> str:
    delta = value - (now or timezone.now())
    if abs(delta) < timedelta(seconds=5):
        return "just now"
    return f"in {_span(delta)}" if delta > timedelta(0) else f"{_span(delta)} ago"


def _iso(value: datetime) -> str:
    return rfc3339(value.astimezone(UTC), timespec="seconds") or ""


def _absolute(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@register.simple_tag
def ago(value: datetime | None, now: datetime | None = None) -> str:
    """Relative time with the absolute one in the tooltip (tables)."""
    if value is None:
        return "–"
    return format_html(
        '<time datetime="{}" title="{}" data-rel>{}</time>', _iso(value), _absolute(value), relative(value, now)
    )


@register.simple_tag
def when(value: datetime | None, now: datetime | None = None) -> str:
    """Relative and absolute time, both visible (the step page)."""
    if value is None:
        return "–"
    return format_html(
        '<time datetime="{}" data-rel>{}</time> <span class="abs">{}</span>',
        _iso(value),
        relative(value, now),
        _absolute(value),
    )


@register.simple_tag
def countdown(value: datetime | None, now: datetime | None = None) -> str:
    """Time left until a deadline; ticks in the browser, overdue shown as such."""
    if value is None:
        return "–"
    now = now or timezone.now()
    overdue = value <= now
    text = f"overdue {_span(now - value)}" if overdue else f"{_span(value - now)} left"
    return format_html(
        '<time datetime="{}" title="{}" class="countdown{}" data-countdown>{}</time>',
        _iso(value),
        _absolute(value),
        " overdue" if overdue else "",
        text,
    )


@register.filter
def absolute(value: datetime | None) -> str:
    return _absolute(value) if value else ""


@register.filter
def isotime(value: str | None) -> str:
    """An RFC 3339 string from an audit record, shown like every other absolute time."""
    parsed = parse_rfc3339(str(value or ""))
    return _absolute(parsed) if parsed else str(value or "")


@register.filter
def has(values: list[str] | None, item: str) -> bool:
    """`envelope.flags|has:"suspicious_text"`."""
    return item in (values or [])


@register.filter
def words(value: str) -> str:
    """`awaiting_approval` -> `awaiting approval`."""
    return str(value or "").replace("_", " ")


@register.filter
def short(value: str, length: int = 12) -> str:
    return str(value or "")[: int(length)]


@register.filter
def seconds(value: float | None) -> str:
    if value is None:
        return ""
    return _span(timedelta(seconds=float(value)))


@register.inclusion_tag("approvals/_nav_counts.html", takes_context=True)
def nav_counts(context: template.Context) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"counts": None}
    counts = queries.queue_counts(teams_of(user), timezone.now(), known=context.get("nav_counts_known"))
    counts["for_you"] = queries.capped_count(for_you.for_you(memberships_of(user), for_you.user_groups(user)))
    return {"counts": counts, "request": request}


@register.filter
def capped(count: int) -> str:
    """A count from queries.capped_count: "1000+" once it reached the cap."""
    return f"{count}+" if count >= queries.COUNT_CAP else str(count)


@register.filter
def host(url: str) -> str:
    """A webhook endpoint's host, never its path or query (which may carry a token)."""
    return url_host(url)


DECIDED = {
    "approve": "Approved",
    "reject": "Rejected",
    "mark_committed": "Marked committed",
    "permit_retry": "Permitted a retry",
    "cancel": "Cancelled the step",
}


@register.filter
def decided(action: str) -> str:
    return DECIDED.get(action, str(action).replace("_", " "))


@register.simple_tag(takes_context=True)
def querystring_with(context: template.Context, name: str, value: str) -> str:
    """The page's query string with `name` set to `value` ("" removes it): a queue's keyset
    pages keep the filters and the other queues' places."""
    params = context["request"].GET.copy()
    params.pop(name, None)
    if value:
        params[name] = value
    return f"?{params.urlencode()}" if params else "?"


@register.filter
def policy_words(step: Any) -> str:
    """Which rule or grant held, refused or approved the step (§11), in a sentence; "" if none."""
    return policy_explained(getattr(step, "policy", None), reason=getattr(step, "reason", "")) or ""


@register.filter
def decided_by(decision: Any) -> str:
    """Who decided: the reviewer's name, or the rule or grant (§11) a decision names."""
    if decision.reviewer_id is not None:
        return str(decision.reviewer.get_username())
    text = str(decision.decided_by)
    if text.startswith("rule:"):
        name, _, version = text[len("rule:") :].rpartition("@v")
        return f"rule {name} (version {version})"
    if text.startswith("grant:"):
        return f"grant {text[len('grant:') :]}"
    return text
