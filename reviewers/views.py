"""The tokens page `/account/tokens/`: a signed-in user's personal reviewer tokens (§10)."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import date
from django.urls import reverse
from django.utils.timezone import localtime
from django.views.decorators.http import require_http_methods, require_POST

from accounts.signin import RECENT_SIGN_IN, signed_in_recently
from dashboard.once import ShownOnce, once_claim, once_token
from dashboard.shell import HtmxHttpRequest, dashboard_login_required, memberships_of, page_render

from .forms import ReviewerTokenCreateForm
from .models import ReviewerToken
from .services import NewReviewerToken, reviewer_token_create, reviewer_token_revoke


@require_http_methods(["GET", "POST"])
@dashboard_login_required
def tokens(request: HtmxHttpRequest) -> HttpResponse:
    """The user's own tokens. A new token is shown once, in the answer to the POST that made it
    (never in a URL, a flash message or the session), and that answer is not cached; posting the
    same form again (a reload) creates nothing (dashboard/once.py)."""
    form, created, repeated, status = ReviewerTokenCreateForm(), None, False, 200
    sign_in_again = False
    if request.method == "POST":
        form = ReviewerTokenCreateForm(request.POST)
        if not signed_in_recently(request):
            # Contract §12: a token outlives the session, so a session left open on a shared
            # screen must not be enough to make one.
            sign_in_again, status = True, 403
        elif not form.is_valid():
            status = 400
        else:
            if once_claim(user_id=request.user.pk, purpose="reviewer-token", token=form.cleaned_data["once"]):
                created = _create(request, form)
            else:
                repeated = True
            form = ReviewerTokenCreateForm()
    owned = ReviewerToken.objects.for_user(request.user.pk).order_by("-created_at", "-pk")
    context = {
        "page": Paginator(owned, 100).get_page(request.GET.get("page")),
        "form": form,
        "once": once_token(),
        "shown": _token_shown(created) if created is not None else None,
        "repeated": repeated,
        "sign_in_again": sign_in_again,
        "recent_minutes": int(RECENT_SIGN_IN.total_seconds() // 60),
        "memberships": memberships_of(request.user),
    }
    response = page_render(request, "reviewers/tokens.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


def _token_shown(created: NewReviewerToken) -> ShownOnce:
    expires_at = created.token.expires_at
    expires = f" It expires {date(localtime(expires_at), 'j M Y H:i')} UTC." if expires_at else ""
    return ShownOnce(
        secret=created.raw,
        heading=f"New token: {created.token.name}",
        advice=f"Copy it now: it is not stored and will not be shown again.{expires}",
        name="token",
        code_id="new-reviewer-token",
        copy_label="Copy the new token",
    )


def _create(request: HtmxHttpRequest, form: ReviewerTokenCreateForm) -> NewReviewerToken:
    return reviewer_token_create(
        user=request.user,  # type: ignore[arg-type]
        name=form.cleaned_data["name"],
        expires_at=form.expires_at(),
    )


@require_POST
@dashboard_login_required
def token_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ReviewerToken.objects.for_user(request.user.pk), pk=pk)  # another's: 404
    if reviewer_token_revoke(user=request.user, token_id=token.pk):  # type: ignore[arg-type]
        messages.success(request, f"Revoked {token.prefix}… ({token.name}): its next request answers 401.")
    else:
        messages.info(request, f"{token.prefix}… was already revoked; nothing changed.")
    return HttpResponseRedirect(reverse("reviewers:tokens"), status=303)
