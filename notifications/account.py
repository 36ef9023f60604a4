"""The user's own account page, /account/: who they are, their teams and roles, their reviewer
tokens (a link to /account/tokens/, the reviewers app's), and the Slack accounts linked to them
(contract §10: Slack's Approve decides as the linked user).

A Slack member is linked from a link Holdpoint signed for that member: pressing a button in
Slack while unlinked answers (to that member alone) with a link to this page, which a signed-in
user confirms with a POST. So a link proves both sides: nobody can claim another person's Slack
id by typing it in, and a link is made only by the user it will act as."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.shell import dashboard_login_required, memberships_of, page_render

from .account_away import away_forms
from .models import SlackLink
from .services import SlackLinkRefused, slack_link_create, slack_link_delete
from .slack import link_token_read


def account_page_render(request: HttpRequest, *, away_bound: Any = None, status: int = 200) -> HttpResponse:
    token = request.GET.get("slack", "")
    pending = link_token_read(token) if token else None
    memberships = memberships_of(request.user)
    response = page_render(
        request,
        "notifications/account.html",
        {
            "memberships": memberships,
            "away_forms": away_forms(request.user, memberships, away_bound),  # type: ignore[arg-type]
            "slack_links": SlackLink.objects.for_user(request.user).order_by("slack_team_id"),  # type: ignore[arg-type]
            "pending": pending,
            "token": token if pending else "",
            "bad_token": bool(token) and pending is None,
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"
    # The link token goes to no other site (same-origin: "no-referrer" would make the form's
    # POST carry Origin: null, which Django's CSRF check refuses).
    response["Referrer-Policy"] = "same-origin"
    return response


@dashboard_login_required
@require_GET
def account_page(request: HttpRequest) -> HttpResponse:
    return account_page_render(request)


@dashboard_login_required
@require_POST
def slack_link_view(request: HttpRequest) -> HttpResponse:
    """Confirm a link Holdpoint signed for a Slack member: it is linked to the signed-in user."""
    pair = link_token_read(request.POST.get("slack", ""))
    if pair is None:
        messages.error(request, "This Slack link is invalid or older than an hour: press Approve in Slack again.")
        return HttpResponseRedirect(reverse("notifications:account"))
    try:
        slack_link_create(user=request.user, slack_team_id=pair[0], slack_user_id=pair[1])  # type: ignore[arg-type]
    except SlackLinkRefused as refusal:
        messages.error(request, str(refusal))
        return HttpResponseRedirect(reverse("notifications:account"))
    messages.success(request, f"Linked Slack member {pair[1]} of workspace {pair[0]}: its Approve decides as you.")
    return HttpResponseRedirect(reverse("notifications:account"))


@dashboard_login_required
@require_POST
def slack_unlink_view(request: HttpRequest, pk: int) -> HttpResponse:
    if slack_link_delete(user=request.user, link_id=pk):  # type: ignore[arg-type]
        messages.success(request, "Unlinked: that Slack account decides nothing any more.")
    else:
        messages.info(request, "That Slack account was not linked to you; nothing changed.")
    return HttpResponseRedirect(reverse("notifications:account"))
