"""The shell every page app shares: the login decorator, the htmx request type, the render
helper and the team lookup.

Page apps (approvals, metrics, webhooks, notifications) import this module and `dashboard.once`,
never each other's views or queries. It sits below them: it imports no page app's views,
only the models that say who belongs to which team.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.contrib.auth.views import redirect_to_login
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from accounts.models import TEAM_SLUG_RE, Membership, Team
from envelopes.models import TOOL_NAME_RE, Tool


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def dashboard_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """login_required that sends an htmx request's whole page to the login form, not a fragment."""

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if request.htmx:
            current = request.htmx.current_url_abs_path or request.get_full_path()
            return HttpResponseClientRedirect(redirect_to_login(current).url)
        return redirect_to_login(request.get_full_path())

    return wrapper


def page_render(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    partial: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """A page, or one of its `{% partialdef %}` sections for an htmx request."""
    name = f"{template}#{partial}" if partial else template
    response = render(request, name, context, status=status)
    # The same URL answers a page or a fragment: caches must tell them apart.
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response


def htmx_targets(request: HtmxHttpRequest, target: str) -> bool:
    """True when an htmx request asks for the element with this id."""
    return bool(request.htmx) and request.htmx.target == target


# --- who sees what -----------------------------------------------------------------------------


def memberships_of(user: User | AnonymousUser) -> list[Membership]:
    if not user.is_authenticated:
        return []
    return list(Membership.objects.filter(user=user).select_related("team").order_by("team__slug"))


def teams_of(user: User | AnonymousUser, *, slug: str = "") -> QuerySet[Team]:
    """The user's teams (one of them when `slug` names one of them; none when it cannot be a slug:
    a URL's or a form's text, a NUL among it, reaches no query)."""
    if not user.is_authenticated or (slug and not re.fullmatch(TEAM_SLUG_RE, slug)):
        return Team.objects.none()
    teams = Team.objects.filter(memberships__user=user)
    if slug:
        teams = teams.filter(slug=slug)
    return teams


def tools_of(user: User | AnonymousUser, name: str, *, team_slug: str = "") -> list[Tool]:
    """The user's tools named `name` (in the team `team_slug` names, when given), by team; none
    when `name` cannot be a tool's name."""
    if not re.fullmatch(TOOL_NAME_RE, name):
        return []
    teams = teams_of(user, slug=team_slug)
    return list(Tool.objects.filter(team__in=teams, name=name).select_related("team").order_by("team__slug"))


def membership_in(memberships: list[Membership], team_id: int) -> Membership | None:
    return next((m for m in memberships if m.team_id == team_id), None)
