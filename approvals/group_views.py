"""A team's reviewer groups (contract §12) at /teams/<team>/groups/: every member sees them, the
team's admins make and remove groups and put reviewers in or take them out. One form posts
every change (`op`); an htmx post answers the groups' section only."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_http_methods

from accounts.groups import GroupError, group_create, group_delete, group_member_add, group_member_remove
from accounts.models import GroupMembership, Membership, ReviewerGroup
from dashboard.shell import HtmxHttpRequest, dashboard_login_required, htmx_targets, page_render, teams_of

OPS = ("create", "delete", "add", "remove")


class GroupChangeForm(forms.Form):
    op = forms.ChoiceField(choices=[(op, op) for op in OPS])
    name = forms.CharField(max_length=100)
    username = forms.CharField(max_length=150, required=False)


@require_http_methods(["GET", "POST"])
@dashboard_login_required
def team_groups(request: HtmxHttpRequest, team: str) -> HttpResponse:
    found = teams_of(request.user, slug=team).first()
    if found is None:
        raise Http404("No such team.")
    membership = Membership.objects.get(user=request.user, team=found)  # type: ignore[misc]
    problem, field, done, status = "", "", "", 200
    if request.method == "POST":
        if not membership.can_administer:
            raise PermissionDenied("Only admins of this team may change its groups.")
        form = GroupChangeForm(request.POST)
        if not form.is_valid():
            field = next(iter(form.errors))
            problem, status = f"{field}: {' '.join(str(e) for e in form.errors[field])}", 400
        else:
            try:
                done = _change(found, **form.cleaned_data)
            except GroupError as refused:
                problem, field, status = str(refused), refused.field, 400
    groups = (
        ReviewerGroup.objects.filter(team=found)
        .order_by("name")
        .prefetch_related(
            Prefetch("members", queryset=GroupMembership.objects.select_related("user").order_by("user__username"))
        )
    )
    context = {
        "team": found,
        "groups": groups,
        "can_administer": membership.can_administer,
        "problem": problem,
        "field": field,
        "done": done,
        "posted": request.POST if problem else {},
    }
    partial = "groups" if htmx_targets(request, "groups") else None
    return page_render(request, "approvals/groups.html", context, partial=partial, status=status)


def _change(team, *, op: str, name: str, username: str) -> str:  # type: ignore[no-untyped-def]
    name = name.strip()
    if op == "create":
        group_create(team=team, name=name)
        return f"Group {name} made."
    if op == "delete":
        if not group_delete(team=team, name=name):
            raise GroupError(f"name: {team.slug} has no group {name!r}.", field="name")
        return f"Group {name} removed; steps held for it wait for it still until a tool or rule names another."
    user = get_user_model().objects.filter(username=username.strip()).first()
    if user is None:
        raise GroupError(f"username: no user {username.strip()!r}.", field="username")
    if op == "add":
        if not ReviewerGroup.objects.filter(team=team, name=name).exists():
            raise GroupError(f"name: {team.slug} has no group {name!r}.", field="name")
        group_member_add(team=team, name=name, user=user)
        return f"{user.get_username()} is in {name}."
    group_member_remove(team=team, name=name, user_id=user.pk)
    return f"{user.get_username()} is no longer in {name}."
