"""The team's webhooks page: endpoints and dead letters, with a redeliver button for admins."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from envelopes.models import Team

from .models import OutboxMessage, WebhookEndpoint
from .services import WebhookError, message_redeliver

DEAD_LETTER_LIMIT = 100


def _teams(request: HttpRequest):  # type: ignore[no-untyped-def]
    return Team.objects.filter(memberships__user=request.user)


@login_required
@require_GET
def dead_letters(request: HttpRequest) -> HttpResponse:
    teams = _teams(request)
    letters = (
        OutboxMessage.objects.dead()
        .filter(team__in=teams)
        .select_related("team", "endpoint", "step")
        .annotate(last_tried_at=Max("delivery_tries__tried_at"))
        .order_by("-created_at", "-id")[:DEAD_LETTER_LIMIT]
    )
    endpoints = WebhookEndpoint.objects.filter(team__in=teams).select_related("team").order_by("id")
    admin_team_ids = set(
        request.user.memberships.filter(role="admin").values_list("team_id", flat=True)  # type: ignore[union-attr]
    )
    return render(
        request,
        "webhooks/dead_letters.html",
        {
            "letters": letters,
            "endpoints": endpoints,
            "admin_team_ids": admin_team_ids,
            "multi_team": teams.count() > 1,
        },
    )


@login_required
@require_POST
def redeliver(request: HttpRequest, pk: int) -> HttpResponse:
    message = OutboxMessage.objects.filter(pk=pk, team__in=_teams(request)).first()
    if message is None:
        raise Http404("No such message in your teams.")
    if not request.user.memberships.filter(team_id=message.team_id, role="admin").exists():  # type: ignore[union-attr]
        messages.error(request, "Only a team admin may redeliver webhooks.")
    else:
        try:
            message_redeliver(message=message)
        except WebhookError as refusal:
            messages.error(request, str(refusal))
        else:
            messages.success(request, f"{message.message_id} queued for one more try.")
    return HttpResponseRedirect(reverse("webhooks:dead-letters"))
