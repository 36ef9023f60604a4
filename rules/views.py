"""The team's rules and grants pages (contract §11, "Managing rules"): `/rules/` with each rule's
figures over 30 days and the steps it acted on, the editor (diff, test against history, save),
the versions, and `/rules/grants/`.

Every member reads; only the team's admins edit, save, make and revoke (checked here, before any
partial is chosen, and again by nothing else: the services trust their caller's role). Each page
works without JavaScript; with htmx, the editor's test and the grants' revoke swap their part.
"""

from __future__ import annotations

import hashlib

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from accounts.models import Membership
from dashboard.shell import HtmxHttpRequest, dashboard_login_required, htmx_targets, memberships_of, page_render
from policy.errors import GrantRefused, RulesInvalid, VersionMismatch
from policy.models import Grant, RuleSetVersion

from . import pages
from .forms import GrantForm, RulesEditForm
from .history import history_test
from .ruleset import RulesFileInvalid, rules_diff, set_editable, set_from_text, set_to_yaml
from .services import grant_add, grant_remove, rule_set_replace, rule_shape, rules_current
from .validation import problem_line

GRANTS_SHOWN = 200


def _membership(request: HtmxHttpRequest) -> tuple[Membership, list[Membership]]:
    """The membership of the team the page is for (`?team=`, else the user's first team)."""
    memberships = memberships_of(request.user)
    slug = request.GET.get("team") or request.POST.get("team") or ""
    chosen = next((m for m in memberships if m.team.slug == slug), None) if slug else None
    if slug and chosen is None:
        raise Http404("No such team among yours.")
    if chosen is None:
        if not memberships:
            raise Http404("You are not in any team.")
        chosen = memberships[0]
    return chosen, memberships


def _admin(request: HtmxHttpRequest) -> Membership:
    membership, _ = _membership(request)
    if not membership.can_administer:
        raise PermissionDenied("Only the team's admins change its rules and grants.")
    return membership


def page_url(name: str, team: str, **query: str) -> str:
    from urllib.parse import urlencode

    return f"{reverse(name)}?{urlencode({'team': team, **query})}"


@require_GET
@dashboard_login_required
def rules_page(request: HtmxHttpRequest) -> HttpResponse:
    if not request.GET.get("team") and not memberships_of(request.user):
        return page_render(request, "rules/no_team.html", {})
    membership, memberships = _membership(request)
    team = membership.team
    version, rules = rules_current(team)
    now = timezone.now()
    context = {
        "team": team,
        "membership": membership,
        "memberships": memberships,
        "version": version,
        "rules": pages.rule_panels(team, rules, now=now),
        "versions": list(RuleSetVersion.objects.filter(team=team).order_by("-version")[:50]),
        "can_administer": membership.can_administer,
    }
    return page_render(request, "rules/rules.html", context)


@require_GET
@dashboard_login_required
def rules_version(request: HtmxHttpRequest) -> HttpResponse:
    membership, _ = _membership(request)
    raw = request.GET.get("version", "")
    version = int(raw) if raw.isdigit() and len(raw) <= 9 else None
    made = RuleSetVersion.objects.filter(team=membership.team, version=version).first() if version else None
    if made is None:
        raise Http404("No such version of the team's rules.")
    previous = RuleSetVersion.objects.filter(team=membership.team, version__lt=version).order_by("-version").first()
    diff = rules_diff(previous.rules if previous else [], made.rules)
    context = {
        "team": membership.team,
        "made": made,
        "text": set_to_yaml(made.version, made.rules, team=membership.team.slug),
        "diff": diff,
        "previous": previous,
    }
    return page_render(request, "rules/version.html", context)


def _digest(text: str, base_version: int) -> str:
    """What a test was run on: the draft's text and the version it was written against. Save
    takes a draft only with the digest of a test of that very draft."""
    return hashlib.sha256(f"{base_version}\n{text}".encode()).hexdigest()


def _draft(form: RulesEditForm, current: list[dict]) -> list:
    """The whole set the form means: the text's set, or the current set with one rule replaced
    (or added) when the form edits one rule."""
    text = form.cleaned_data["rules"]
    one = form.cleaned_data["rule"]
    if not one:
        return set_editable(set_from_text(text))
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RulesFileInvalid(f"not YAML: {getattr(error, 'problem', None) or error}") from error
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        raise RulesFileInvalid("one rule is a mapping of its fields (name, tools, when, effect, ...)")
    draft = [rule for rule in set_editable(current)]
    names = [rule.get("name") for rule in draft]
    if one != "new" and one in names:
        draft[names.index(one)] = value
    else:
        draft.append(value)
    return set_editable(draft)


@require_http_methods(["GET", "POST"])
@dashboard_login_required
def rules_edit(request: HtmxHttpRequest) -> HttpResponse:
    membership = _admin(request)
    team = membership.team
    version, rules = rules_current(team)
    current = [rule_shape(rule) for rule in rules]
    one = request.GET.get("rule", "") if request.method == "GET" else request.POST.get("rule", "")
    if request.method == "GET":
        if one and one != "new":
            shown = [rule for rule in current if rule["name"] == one]
            if not shown:
                raise Http404("No such rule.")
            text = pages.one_rule_yaml(shown[0])
        elif one == "new":
            text = pages.NEW_RULE
        else:
            text = set_to_yaml(version, current, team=team.slug)
        form = RulesEditForm(initial={"rules": text, "base_version": version, "rule": one})
        return _editor(request, membership, form, version=version, one=one)

    form = RulesEditForm(request.POST)
    if not form.is_valid():
        return _editor(request, membership, form, version=version, one=one, status=400)
    base = form.cleaned_data["base_version"]
    text = form.cleaned_data["rules"]
    action = request.POST.get("action", "test")
    try:
        draft = _draft(form, current)
    except RulesFileInvalid as error:
        form.add_error("rules", str(error))
        return _editor(request, membership, form, version=version, one=one, status=422)
    diff = rules_diff(current, draft)
    problems = pages.problems_of(draft, membership.team)
    if problems:
        return _editor(request, membership, form, version=version, one=one, diff=diff, problems=problems, status=422)
    notes: list[tuple[str, str]] = []
    if base != version:
        notes.append(
            (
                "warn",
                f"Someone saved version {version} since you opened the editor: the diff and the test "
                "below are against it. Keep your draft, open the editor again and test it to save.",
            )
        )
    tested = action == "save" and request.POST.get("tested", "") == _digest(text, base) and base == version
    if action == "save" and tested:
        try:
            rule_set_replace(
                team=team, rules=draft, actor=request.user.get_username(), if_version=base, via="dashboard"
            )
        except VersionMismatch:
            notes.append(
                ("error", "Someone saved the rules while you tested: test your draft against the new version.")
            )
        except RulesInvalid as invalid:
            return _editor(
                request,
                membership,
                form,
                version=version,
                one=one,
                diff=diff,
                problems=[problem_line(p) for p in invalid.problems],
                status=422,
            )
        else:
            saved, _ = rules_current(team)
            messages.success(request, f"Saved version {saved} of the rules ({diff.summary()}).")
            target = page_url("rules:page", team.slug)
            return HttpResponseClientRedirect(target) if request.htmx else HttpResponseRedirect(target)
    elif action == "save" and base == version:
        notes.append(("warn", "Test this draft against history before saving it: the result is below."))
    report = history_test(team=team, draft=draft, current=current)
    return _editor(
        request,
        membership,
        form,
        version=version,
        one=one,
        diff=diff,
        report=pages.report_view(report),
        digest=_digest(text, version) if base == version else "",
        notes=notes,
    )


def _editor(
    request: HtmxHttpRequest,
    membership: Membership,
    form: RulesEditForm,
    *,
    version: int,
    one: str,
    diff: object = None,
    problems: list[str] | None = None,
    report: object = None,
    digest: str = "",
    notes: list[tuple[str, str]] | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "team": membership.team,
        "form": form,
        "version": version,
        "one": one,
        "diff": diff,
        "problems": problems or [],
        "report": report,
        "digest": digest,
        "notes": notes or [],
    }
    partial = "result" if htmx_targets(request, "editor-result") else None
    if partial:
        status = 200  # htmx swaps 2xx answers only: the refusal is in the fragment
    response = page_render(request, "rules/edit.html", context, partial=partial, status=status)
    response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "POST"])
@dashboard_login_required
def grants_page(request: HtmxHttpRequest) -> HttpResponse:
    membership, memberships = _membership(request)
    team = membership.team
    form = GrantForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if not membership.can_administer:
            raise PermissionDenied("Only the team's admins make grants here.")
        if form.is_valid():
            try:
                grant = grant_add(
                    team=team, actor=request.user.get_username(), via="dashboard", **form.grant_arguments()
                )
            except GrantRefused as refused:
                form.add_error(None, str(refused))
                status = 422
            else:
                messages.success(
                    request,
                    f"Grant #{grant.pk} on {grant.tool} made: live until {grant.expires_at:%Y-%m-%d %H:%M} UTC.",
                )
                return HttpResponseRedirect(page_url("rules:grants", team.slug))
        else:
            status = 400
    now = timezone.now()
    grants = list(Grant.objects.filter(team=team).order_by("-created_at", "-id")[:GRANTS_SHOWN])
    context = {
        "team": team,
        "membership": membership,
        "memberships": memberships,
        "grants": pages.grant_rows(grants, now=now),
        "form": form,
        "can_administer": membership.can_administer,
    }
    return page_render(request, "rules/grants.html", context, status=status)


@require_POST
@dashboard_login_required
def grant_revoke_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    membership = _admin(request)
    team = membership.team
    if not Grant.objects.filter(team=team, pk=pk).exists():
        raise Http404("No such grant in this team.")
    grant = grant_remove(team=team, grant_id=pk, actor=request.user.get_username(), via="dashboard")
    if htmx_targets(request, f"grant-{grant.pk}"):
        row = pages.grant_rows([grant], now=timezone.now())[0]
        return page_render(
            request, "rules/grants.html", {"row": row, "team": team, "can_administer": True}, partial="grant-row"
        )
    messages.success(request, f"Grant #{grant.pk} revoked: it matches no call from now on.")
    return HttpResponseRedirect(page_url("rules:grants", team.slug))
