"""The team's notifications page: channels with their last success and last error, and the
latest messages. Team admins create channels, send a test, disable a channel and rotate a
webhook channel's signing secret (shown once, in the answer that made it)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from accounts.models import Team
from dashboard.once import ShownOnce, once_claim, once_token, url_host
from dashboard.shell import (
    HtmxHttpRequest,
    dashboard_login_required,
    memberships_of,
    page_render,
    teams_of,
)

from .forms import ChannelCreateForm, ChannelDisableForm, ChannelRotateForm
from .models import DEFAULT_EVENTS, EVENTS, Channel, Message
from .sending import message_deliver_now
from .services import ChannelInvalid, channel_create, channel_disable, channel_secret_rotate, channel_test

CHANNEL_LIMIT = 100
MESSAGE_LIMIT = 50


def _teams(request: HttpRequest) -> QuerySet[Team]:
    return teams_of(request.user)


def _admin_team_ids(request: HttpRequest) -> set[int]:
    return {membership.team_id for membership in memberships_of(request.user) if membership.role == "admin"}


def _page(
    request: HttpRequest,
    *,
    form: ChannelCreateForm | None = None,
    secret: ShownOnce | None = None,
    created: Channel | None = None,
    repeated: bool = False,
    status: int = 200,
) -> HttpResponse:
    teams = _teams(request)
    admin_team_ids = _admin_team_ids(request)
    channels = Channel.objects.filter(team__in=teams).select_related("team", "escalate_to").order_by("id")
    recent = (
        Message.objects.filter(team__in=teams)
        .select_related("channel")
        .prefetch_related("send_tries")
        .order_by("-created_at", "-id")[:MESSAGE_LIMIT]
    )
    response = page_render(
        request,
        "notifications/channels.html",
        {
            "channels": channels[:CHANNEL_LIMIT],
            "recent": recent,
            "admin_team_ids": admin_team_ids,
            "admin_teams": [team for team in teams.order_by("slug") if team.pk in admin_team_ids],
            "multi_team": teams.count() > 1,
            "form": form,
            "kinds": Channel.Kind.values,
            "events": EVENTS,
            "chosen_events": request.POST.getlist("events") if form is not None else list(DEFAULT_EVENTS),
            "once": once_token(),
            "secret": secret,
            "created": created,
            "repeated": repeated,
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"  # it may show a secret; and every form has a fresh token
    return response


@dashboard_login_required
@require_GET
def channels_page(request: HtmxHttpRequest) -> HttpResponse:
    return _page(request)


@dashboard_login_required
@require_POST
def channel_create_view(request: HtmxHttpRequest) -> HttpResponse:
    """A team admin adds a channel; a webhook channel's secret is shown once, in this answer."""
    form = ChannelCreateForm(request.POST)
    if not form.is_valid():
        return _page(request, form=form, status=400)
    team = _teams(request).filter(slug=form.cleaned_data["team"]).first()
    if team is None:
        raise Http404("No such team.")
    if team.pk not in _admin_team_ids(request):
        raise PermissionDenied("Only a team admin may add notification channels.")
    if not once_claim(user_id=request.user.pk, purpose="notification-channel", token=form.cleaned_data["once"]):
        return _page(request, repeated=True)
    try:
        created = channel_create(
            team=team,
            kind=form.cleaned_data["kind"],
            target=form.cleaned_data["target"],
            events=form.cleaned_data["events"],
            tools=form.tool_list(),
            name=form.cleaned_data["name"],
        )
    except ChannelInvalid as refusal:
        form.add_error(refusal.field if refusal.field in form.fields else None, str(refusal))
        return _page(request, form=form, status=400)
    if created.secret:
        return _page(request, secret=_shown(created.channel, created.secret, rotated=False))
    return _page(request, created=created.channel)


def _admin_channel(request: HtmxHttpRequest, pk: int) -> Channel:
    channel = Channel.objects.filter(pk=pk, team__in=_teams(request)).select_related("team").first()
    if channel is None:
        raise Http404("No such channel in your teams.")
    if channel.team_id not in _admin_team_ids(request):
        raise PermissionDenied("Only a team admin may change notification channels.")
    return channel


@dashboard_login_required
@require_POST
def channel_test_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Send a test message through the channel now, and say how it went."""
    channel = _admin_channel(request, pk)
    if channel.disabled:
        messages.error(request, f"{channel.label} is disabled; nothing was sent.")
        return HttpResponseRedirect(reverse("notifications:channels"))
    status = message_deliver_now(channel_test(channel=channel))
    channel.refresh_from_db()
    if status == Message.Status.SENT:
        messages.success(request, f"Test sent through {channel.label}.")
    else:
        messages.error(
            request, f"The test through {channel.label} failed: {channel.last_error}. It is retried like any message."
        )
    return HttpResponseRedirect(reverse("notifications:channels"))


@dashboard_login_required
@require_POST
def channel_rotate_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    channel = _admin_channel(request, pk)
    form = ChannelRotateForm(request.POST)
    if not form.is_valid() or channel.kind != Channel.Kind.WEBHOOK:
        return _page(request, status=400)
    if not once_claim(user_id=request.user.pk, purpose=f"channel-rotate:{channel.pk}", token=form.cleaned_data["once"]):
        return _page(request, repeated=True)
    secret = channel_secret_rotate(channel=channel)
    return _page(request, secret=_shown(channel, secret, rotated=True))


def _shown(channel: Channel, secret: str, *, rotated: bool) -> ShownOnce:
    subject = f"{channel.label} on {url_host(channel.target)}"
    return ShownOnce.signing_secret(secret, subject=subject, rotated=rotated, made="Added")


@dashboard_login_required
@require_POST
def channel_disable_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    channel = _admin_channel(request, pk)
    if channel.disabled:
        messages.info(request, f"{channel.label} was already disabled; nothing changed.")
        return HttpResponseRedirect(reverse("notifications:channels"))
    form = ChannelDisableForm(request.POST)
    reason = (form.cleaned_data["reason"].strip() if form.is_valid() else "") or "disabled by a team admin"
    dropped = channel_disable(channel=channel, reason=f"{reason} ({request.user.get_username()})")
    messages.success(request, f"Disabled {channel.label}; {dropped} waiting notice(s) and message(s) dropped.")
    return HttpResponseRedirect(reverse("notifications:channels"))
