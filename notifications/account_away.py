"""Away on the account page (contract §12 "Delegation"): a form per team the user decides in,
to be away until a time with a delegate, or back. The reviewer API's `/teams/{team}/away` calls
the same services (accounts.away); a refusal is shown on the form, at the field it names."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.away import AwayError, away_clear, away_set, delegate_choices
from accounts.models import Membership
from dashboard.shell import dashboard_login_required, memberships_of


class AwayForm(forms.Form):
    until = forms.DateTimeField(
        label="Away until (UTC)",
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    delegate = forms.ChoiceField(label="Delegate, who decides for you")

    def __init__(self, *args: Any, membership: Membership, choices: list[str], **kwargs: Any) -> None:
        kwargs["prefix"] = f"away-{membership.team.slug}"
        super().__init__(*args, **kwargs)
        self.membership = membership
        delegate = self.fields["delegate"]
        assert isinstance(delegate, forms.ChoiceField)
        delegate.choices = [("", "—")] + [(name, name) for name in choices]
        self.is_away = membership.is_away(timezone.now())
        if self.is_away and not self.is_bound:
            self.initial = {"until": membership.away_until, "delegate": getattr(membership, "delegate_username", "")}


def away_forms(user: User, memberships: list[Membership], bound: AwayForm | None = None) -> list[AwayForm]:
    """A form per team the user decides in (two queries: the delegates, the teams' choices)."""
    deciding = [m for m in memberships if m.can_decide]
    delegates = dict(
        Membership.objects.filter(pk__in=[m.pk for m in deciding], delegate__isnull=False).values_list(
            "pk", "delegate__username"
        )
    )
    choices = delegate_choices(user=user, team_ids=[m.team_id for m in deciding])
    forms_: list[AwayForm] = []
    for membership in deciding:
        membership.delegate_username = delegates.get(membership.pk)  # type: ignore[attr-defined]
        if bound is not None and bound.membership.team_id == membership.team_id:
            bound.membership.delegate_username = membership.delegate_username  # type: ignore[attr-defined]
            forms_.append(bound)
        else:
            forms_.append(AwayForm(membership=membership, choices=choices[membership.team_id]))
    return forms_


@dashboard_login_required
@require_POST
def away_view(request: HttpRequest, team: str) -> HttpResponse:
    """Set or clear (the `clear` button) the user's time away from one of their teams."""
    from .account import account_page_render  # the page this form is on

    memberships = memberships_of(request.user)
    membership = next((m for m in memberships if m.team.slug == team and m.can_decide), None)
    if membership is None:
        raise Http404("No such team among those you decide in.")
    user: User = request.user  # type: ignore[assignment]
    if "clear" in request.POST:
        away_clear(user=user, team=membership.team)
        messages.success(request, f"You are back in {membership.team.slug}: notices reach you again.")
        return HttpResponseRedirect(reverse("notifications:account"))
    form = AwayForm(
        request.POST,
        membership=membership,
        choices=delegate_choices(user=user, team_ids=[membership.team_id])[membership.team_id],
    )
    if form.is_valid():
        try:
            away_set(
                user=user,
                team=membership.team,
                until=form.cleaned_data["until"],
                delegate=form.cleaned_data["delegate"],
            )
        except AwayError as refused:
            form.add_error(refused.field, str(refused).partition(": ")[2] or str(refused))
        except PermissionError as refused:
            form.add_error(None, str(refused))
    if not form.is_valid():
        return account_page_render(request, away_bound=form, status=400)
    messages.success(
        request,
        f"Away from {membership.team.slug} until {form.cleaned_data['until']:%Y-%m-%d %H:%M} UTC: "
        f"{form.cleaned_data['delegate']} decides for you, and you get no notices.",
    )
    return HttpResponseRedirect(reverse("notifications:account"))
