"""The quarantine pages: payloads that broke the contract, kept redacted (contract §2), listed
with the queues' filters and shown one by one, escaped."""

from __future__ import annotations

import json

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.shell import HtmxHttpRequest, dashboard_login_required, memberships_of, page_render, teams_of
from envelopes.models import Quarantine

from . import queries
from .forms import AGE_CHOICES, QueueFilterForm


@require_GET
@dashboard_login_required
def quarantine_list(request: HtmxHttpRequest) -> HttpResponse:
    memberships = memberships_of(request.user)
    filter_form = QueueFilterForm(request.GET)
    filters = filter_form.filters()
    teams = teams_of(request.user, slug=filters.team)
    now = timezone.now()
    page = queries.CappedPaginator(queries.quarantined(teams, filters, now), 50).get_page(request.GET.get("page"))
    context = {
        "filter_form": filter_form,
        "filters": filters,
        "memberships": memberships,
        "multi_team": len(memberships) > 1,
        "page": page,
        "choices": queries.filter_choices(teams),
        "age_choices": AGE_CHOICES,
        "now": now,
    }
    return page_render(request, "approvals/quarantine_list.html", context)


def _readable_body(body: str) -> str:
    """Indented JSON when the redacted body parses; as received otherwise. Escaped either way."""
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        return body


@require_GET
@dashboard_login_required
def quarantine_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    item = get_object_or_404(
        Quarantine.objects.filter(team__in=teams_of(request.user)).select_related("team", "step"),
        pk=pk,
    )
    memberships = memberships_of(request.user)
    context = {
        "item": item,
        "body": _readable_body(item.body),
        "multi_team": len(memberships) > 1,
        "now": timezone.now(),
    }
    return page_render(request, "approvals/quarantine_detail.html", context)
