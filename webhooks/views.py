"""The team's webhooks page: endpoints and dead letters. Team admins register, rotate and disable
endpoints (a signing secret is shown once, in the answer that made it) and redeliver dead letters."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Max, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Team
from dashboard.once import ShownOnce, once_claim, once_token, url_host
from dashboard.shell import (
    HtmxHttpRequest,
    dashboard_login_required,
    membership_in,
    memberships_of,
    page_render,
    teams_of,
)
from outbound import ssrf

from .forms import EndpointCreateForm, EndpointDisableForm, EndpointRotateForm
from .models import OutboxMessage, WebhookEndpoint
from .services import WebhookError, endpoint_create, endpoint_disable, endpoint_secret_rotate, message_redeliver

DEAD_LETTER_LIMIT = 100
ENDPOINT_LIMIT = 100


def _teams(request: HttpRequest) -> QuerySet[Team]:
    return teams_of(request.user)


def _admin_team_ids(request: HttpRequest) -> set[int]:
    return {membership.team_id for membership in memberships_of(request.user) if membership.role == "admin"}


def _page(
    request: HttpRequest,
    *,
    form: EndpointCreateForm | None = None,
    secret: ShownOnce | None = None,
    repeated: bool = False,
    status: int = 200,
) -> HttpResponse:
    teams = _teams(request)
    letters = (
        OutboxMessage.objects.dead()
        .filter(team__in=teams)
        .select_related("team", "endpoint", "step")
        .annotate(last_tried_at=Max("delivery_tries__tried_at"))
        .order_by("-created_at", "-id")[:DEAD_LETTER_LIMIT]
    )
    endpoints = WebhookEndpoint.objects.filter(team__in=teams).select_related("team").order_by("id")
    admin_team_ids = _admin_team_ids(request)
    response = page_render(
        request,
        "webhooks/dead_letters.html",
        {
            "letters": letters,
            "endpoints": endpoints[:ENDPOINT_LIMIT],
            "admin_team_ids": admin_team_ids,
            "admin_teams": [team for team in teams.order_by("slug") if team.pk in admin_team_ids],
            "multi_team": teams.count() > 1,
            "form": form or EndpointCreateForm(),
            "once": once_token(),
            "secret": secret,
            "repeated": repeated,
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"  # it may show a secret; and every form has a fresh token
    return response


@dashboard_login_required
@require_GET
def dead_letters(request: HtmxHttpRequest) -> HttpResponse:
    return _page(request)


@dashboard_login_required
@require_POST
def endpoint_create_view(request: HtmxHttpRequest) -> HttpResponse:
    """A team admin registers an endpoint; its signing secret is shown once, in this answer."""
    form = EndpointCreateForm(request.POST)
    if not form.is_valid():
        return _page(request, form=form, status=400)
    team = _teams(request).filter(slug=form.cleaned_data["team"]).first()
    if team is None:
        raise Http404("No such team.")
    if team.pk not in _admin_team_ids(request):
        raise PermissionDenied("Only a team admin may register webhook endpoints.")
    if not once_claim(user_id=request.user.pk, purpose="webhook-endpoint", token=form.cleaned_data["once"]):
        return _page(request, repeated=True)
    try:
        created = endpoint_create(team=team, url=form.cleaned_data["url"])
    except ssrf.UnsafeTarget as refusal:
        form.add_error("url", str(refusal))
        return _page(request, form=form, status=400)
    return _page(request, secret=_shown(created.endpoint, created.secret, rotated=False))


def _admin_endpoint(request: HtmxHttpRequest, pk: int) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.filter(pk=pk, team__in=_teams(request)).select_related("team").first()
    if endpoint is None:
        raise Http404("No such endpoint in your teams.")
    if endpoint.team_id not in _admin_team_ids(request):
        raise PermissionDenied("Only a team admin may change webhook endpoints.")
    return endpoint


@dashboard_login_required
@require_POST
def endpoint_rotate_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A new signing secret, used from the next try on; shown once, in this answer."""
    endpoint = _admin_endpoint(request, pk)
    form = EndpointRotateForm(request.POST)
    if not form.is_valid():
        return _page(request, status=400)
    purpose = f"webhook-rotate:{endpoint.pk}"
    if not once_claim(user_id=request.user.pk, purpose=purpose, token=form.cleaned_data["once"]):
        return _page(request, repeated=True)
    secret = endpoint_secret_rotate(endpoint=endpoint)
    return _page(request, secret=_shown(endpoint, secret, rotated=True))


def _shown(endpoint: WebhookEndpoint, secret: str, *, rotated: bool) -> ShownOnce:
    subject = f"endpoint #{endpoint.pk} on {url_host(endpoint.url)}"
    return ShownOnce.signing_secret(secret, subject=subject, rotated=rotated, made="Registered")


@dashboard_login_required
@require_POST
def endpoint_disable_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    endpoint = _admin_endpoint(request, pk)
    if not endpoint.active:
        messages.info(request, f"Endpoint #{endpoint.pk} was already disabled; nothing changed.")
        return HttpResponseRedirect(reverse("webhooks:dead-letters"))
    form = EndpointDisableForm(request.POST)
    reason = (form.cleaned_data["reason"].strip() if form.is_valid() else "") or "disabled by a team admin"
    dead = endpoint_disable(endpoint=endpoint, reason=f"{reason} ({request.user.get_username()})")
    messages.success(request, f"Disabled endpoint #{endpoint.pk}; its {dead} pending message(s) are now dead letters.")
    return HttpResponseRedirect(reverse("webhooks:dead-letters"))


@dashboard_login_required
@require_POST
def redeliver(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    message = OutboxMessage.objects.filter(pk=pk, team__in=_teams(request)).first()
    if message is None:
        raise Http404("No such message in your teams.")
    membership = membership_in(memberships_of(request.user), message.team_id)
    if membership is None or membership.role != "admin":
        messages.error(request, "Only a team admin may redeliver webhooks.")
    else:
        try:
            message_redeliver(message=message)
        except WebhookError as refusal:
            messages.error(request, str(refusal))
        else:
            messages.success(request, f"{message.message_id} queued for one more try.")
    return HttpResponseRedirect(reverse("webhooks:dead-letters"))
