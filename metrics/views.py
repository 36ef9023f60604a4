"""The tool page, the overview, and `/metrics` for Prometheus.

Pages start from the user's memberships: another team's tool is a 404. Viewers and reviewers
read; admins also edit the catalog (through envelopes.configuration.error_code_upsert).
"""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Membership
from dashboard import shell as dashboard
from dashboard.shell import HtmxHttpRequest, dashboard_login_required
from envelopes.configuration import ConfigurationError, error_code_upsert, tool_configure
from envelopes.models import ErrorCode, Tool

from . import prometheus
from .activity import attempts_per_step
from .counts import HourCounts
from .forms import ErrorCodeForm, ToolSettingsForm, initial_for_entry, initial_for_undocumented
from .panels import DEFAULT_WINDOW_KEY, WINDOWS, tool_charts
from .queries import (
    DOCUMENTED_SHARE_TARGET,
    UndocumentedCode,
    catalog,
    held_now,
    metrics_representation,
    overview,
    shadow_counts,
    tool_series,
    undocumented_codes,
)

SETTINGS_SHOWN = (
    ("side_effects", "Writes (side effects)"),
    ("required_approvals", "Approvals required"),
    ("approver_group", "Approver group"),
    ("escalate_after_s", "Escalate after (s)"),
    ("escalate_to", "Escalate to group"),
    ("on_approval_expiry", "An expired request for approval"),
    ("max_attempts", "Attempts at most"),
    ("consistency_window_s", "Consistency window (s)"),
    ("verification_deadline_s", "Verification deadline (s)"),
    ("approval_ttl_s", "Approval expires after (s)"),
    ("halt_cooldown_s", "Halt cooldown (s)"),
    ("safe_detail_keys", "Extra safe_details keys"),
    ("strict_codes", "Refuse undocumented codes"),
)


def _member_tools(request: HttpRequest, name: str, team_slug: str) -> list[Tool]:
    tools = dashboard.tools_of(request.user, name, team_slug=team_slug)
    if not tools:
        raise Http404("No such tool in your teams.")
    return tools


def _membership(request: HttpRequest, tool: Tool) -> Membership:
    membership = dashboard.membership_in(dashboard.memberships_of(request.user), tool.team_id)
    if membership is None:
        raise Http404("No such tool in your teams.")
    return membership


def _setting(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "–"
    return str(value)


def tool_page_url(tool: Tool, window: str = "", anchor: str = "") -> str:
    query = {"team": tool.team.slug}
    if window and window != DEFAULT_WINDOW_KEY:
        query["window"] = window
    return f"{reverse('metrics-tool', args=[tool.name])}?{urlencode(query)}{anchor}"


@require_GET
@dashboard_login_required
def tool_page(request: HtmxHttpRequest, tool: str) -> HttpResponse:
    tools = _member_tools(request, tool, request.GET.get("team", ""))
    if len(tools) > 1:
        return render(request, "metrics/tool_choose.html", {"tools": tools, "name": tool})
    found = tools[0]
    membership = _membership(request, found)
    window = WINDOWS.get(request.GET.get("window", ""), WINDOWS[DEFAULT_WINDOW_KEY])
    now = timezone.now()
    since, until = window.bounds(now)
    series = tool_series(found, since, until, window.bin_size)
    shadow = shadow_counts([found], since, until).get(found.pk)
    metrics = metrics_representation(found, since, until, series.total, attempts_per_step(series.total, since), shadow)
    context = {
        "tool": found,
        "membership": membership,
        "can_administer": membership.can_administer,
        "can_decide": membership.can_decide,
        "window": window,
        "windows": [(w, tool_page_url(found, w.key)) for w in WINDOWS.values()],
        "since": since,
        "until": until,
        "now": now,
        "metrics": metrics,
        "share_below_target": (
            metrics["documented_code_share"] is not None and metrics["documented_code_share"] < DOCUMENTED_SHARE_TARGET
        ),
        "target": DOCUMENTED_SHARE_TARGET,
        "charts": tool_charts(series),
        "held": held_now([found]).get(found.pk),
        "halted": found.is_halted(now),
        "settings_rows": [(label, _setting(getattr(found, name))) for name, label in SETTINGS_SHOWN],
        "settings_form": ToolSettingsForm.for_tool(found) if membership.can_administer else None,
        "page_url": tool_page_url(found, window.key),
        **_codes_context(
            found, series.total, membership.can_administer, request.GET.get("edit", ""), "add" in request.GET
        ),
    }
    partial = "metrics" if request.htmx and request.htmx.target == "tool-metrics" else None
    name = f"metrics/tool.html#{partial}" if partial else "metrics/tool.html"
    response = render(request, name, context)
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response


def _codes_context(tool: Tool, counts: HourCounts, can_administer: bool, editing: str, adding: bool) -> dict[str, Any]:
    """The catalog panels; an admin gets a "Document it" button per undocumented code, the form
    of the one entry named by `?edit=<id>`, and the new-entry form with `?add=1` (a form with
    its select widgets costs more to render than the rest of the page)."""
    undocumented = undocumented_codes(tool, counts)
    entries = catalog(tool)
    if not can_administer:
        return {"undocumented": [(code, None) for code in undocumented], "catalog": [(e, None) for e in entries]}
    return {
        # One click documents a code with what agents sent along with it; the entry can then be
        # edited in the catalog. The values are posted as plain hidden fields (no form widgets).
        "undocumented": [(seen, _document_it(seen)) for seen in undocumented],
        "catalog": [(entry, _edit_form(entry) if str(entry.pk) == editing else None) for entry in entries],
        "new_code_form": ErrorCodeForm(prefix="new") if adding else None,
    }


def _document_it(seen: UndocumentedCode) -> dict[str, Any]:
    initial = initial_for_undocumented(seen)
    return {"prefix": f"doc-{seen.code}", "fields": [(name, str(value)) for name, value in initial.items()], **initial}


def _edit_form(entry: ErrorCode) -> ErrorCodeForm:
    return ErrorCodeForm(initial=initial_for_entry(entry), prefix=f"edit-{entry.pk}")


def _administered_tool(request: HtmxHttpRequest, tool: str, what: str) -> Tool:
    """The posted tool of the posted team, when the user is an admin of that team."""
    team_slug = request.POST.get("team", "")
    if not team_slug:
        raise Http404("Name the tool's team.")
    found = _member_tools(request, tool, team_slug)[0]
    if not _membership(request, found).can_administer:
        raise PermissionDenied(f"Only admins of this team {what}.")
    return found


def _not_saved(request: HtmxHttpRequest, what: str, problems: str, back: str) -> HttpResponse:
    messages.error(request, f"{what} not saved: {problems}")
    return HttpResponseRedirect(back, status=303)


def _form_problems(form: forms.Form) -> str:
    return "; ".join(f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items())


@require_POST
@dashboard_login_required
def code_save(request: HtmxHttpRequest, tool: str) -> HttpResponse:
    """Add, change or document one catalog entry (admins of the tool's team)."""
    found = _administered_tool(request, tool, "edit the catalog")
    prefix = request.POST.get("form_prefix", "")
    if not prefix.replace("-", "").replace("_", "").isalnum():
        prefix = "new"
    form = ErrorCodeForm(request.POST, prefix=prefix)
    back = tool_page_url(found, request.POST.get("window", ""), "#catalog")
    if not form.is_valid():
        return _not_saved(request, "The code was", _form_problems(form), back)
    data = form.cleaned_data
    try:
        entry = error_code_upsert(
            team=found.team,
            tool_name=found.name if data["scope"] == "tool" else "*",
            code=data["code"],
            fields=form.entry_fields(),
        )
    except ConfigurationError as error:
        return _not_saved(request, "The code was", str(error), back)
    where = "for this tool" if entry.tool_id else "for every tool of the team"
    messages.success(request, f"{entry.code} is documented {where}.")
    return HttpResponseRedirect(back, status=303)


@require_POST
@dashboard_login_required
def tool_settings_save(request: HtmxHttpRequest, tool: str) -> HttpResponse:
    """Change a tool's recovery settings (admins of the tool's team); audited with who did it."""
    found = _administered_tool(request, tool, "change a tool's settings")
    back = tool_page_url(found, request.POST.get("window", ""), "#settings")
    form = ToolSettingsForm(request.POST)
    if not form.is_valid():
        return _not_saved(request, "The settings were", _form_problems(form), back)
    try:
        tool_configure(team=found.team, name=found.name, settings=form.cleaned_data, actor=request.user.get_username())
    except ConfigurationError as error:
        return _not_saved(request, "The settings were", str(error), back)
    messages.success(request, f"Settings of {found.name} saved.")
    return HttpResponseRedirect(back, status=303)


@require_GET
@dashboard_login_required
def overview_page(request: HtmxHttpRequest) -> HttpResponse:
    teams = dashboard.teams_of(request.user)
    tools = list(Tool.objects.filter(team__in=teams).select_related("team").order_by("team__slug", "name"))
    # The page's 24-hour window, in whole hours plus the current one (no ragged first hour to
    # read live), like the tool page's.
    since, until = WINDOWS[DEFAULT_WINDOW_KEY].bounds(timezone.now())
    rows = overview(tools, since, until)
    context = {
        "rows": [(row, tool_page_url(row.tool)) for row in rows],
        "since": since,
        "until": until,
        "now": until,
        "target": DOCUMENTED_SHARE_TARGET,
        "multi_team": len({tool.team_id for tool in tools}) > 1,
        "has_teams": teams.exists(),
    }
    polled = request.htmx and request.htmx.target == "overview"
    name = "metrics/overview.html#overview" if polled else "metrics/overview.html"
    response = render(request, name, context)
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response


def _scraper_allowed(request: HttpRequest) -> bool:
    """A staff session, or `Authorization: Bearer <HOLDPOINT_METRICS_TOKEN>` when that is set.

    The labels name teams and tools, so the endpoint is never public; Prometheus scrapes it
    with the token (`authorization: {credentials: ...}` in its scrape config).
    """
    token = settings.HOLDPOINT_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_staff)


@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    if not _scraper_allowed(request):
        response = HttpResponse(
            "Authentication required: a staff session, or Authorization: Bearer <HOLDPOINT_METRICS_TOKEN>.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="holdpoint-metrics"'
        return response
    return HttpResponse(prometheus.render(prometheus.families()), content_type=prometheus.CONTENT_TYPE)
