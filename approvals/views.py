"""The reviewers' dashboard (contract §7): queues, search, the step page and decisions.

Function views that work without JavaScript; htmx requests get the partial they target.
Every read starts from the user's memberships: another team's object is a 404, in pages and
partials alike. Writes go through approvals.services only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from accounts.away import away_in_teams
from accounts.models import ApiKey, Membership
from dashboard.once import ShownOnce, once_claim, once_token
from dashboard.shell import (
    HtmxHttpRequest,
    dashboard_login_required,
    htmx_targets,
    membership_in,
    memberships_of,
    page_render,
    teams_of,
    tools_of,
)
from envelopes.errors import StepNotFound
from envelopes.models import Step, Tool
from envelopes.proposal import previous_proposal, proposal_of
from telemetry.traceparent import trace_url

from . import for_you, inputs, queries, timeline
from .forms import AGE_CHOICES, ApiKeyCreateForm, DecisionForm, QueueFilterForm, ToolCancelHeldForm, ToolResumeForm
from .panel import decision_panel
from .services import (
    DecisionRefused,
    DecisionResult,
    InputRefused,
    api_key_create_by_admin,
    api_key_revoke_by_admin,
    step_decide,
    tool_cancel_held_steps,
    tool_resume_by_reviewer,
)
from .similar import SimilarPanel, similar_default

QUEUES_CHANGED = "queues-changed"  # htmx event: the nav counts refresh at once
# The query parameters this module reads by a built name (a queue's next page), for the fuzzers.
QUERY_PARAMETERS = tuple(f"{queue.key}_after" for queue in queries.STEP_QUEUES)


@dataclass(frozen=True)
class Feedback:
    """The answer to a decision, shown in the re-rendered fragment (htmx) or as a flash."""

    level: str  # success | info | error
    text: str
    already_decided: bool = False

    @property
    def detail(self) -> str:
        """The text under an "Already decided." heading, without repeating it."""
        rest = self.text.removeprefix("Already decided: ")
        return rest[:1].upper() + rest[1:]


def _safe_next(request: HttpRequest, fallback: str) -> str:
    candidate = request.POST.get("next") or ""
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return fallback


def _redirect(request: HtmxHttpRequest, url: str) -> HttpResponse:
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return HttpResponseRedirect(url, status=303)


# --- queues ------------------------------------------------------------------------------------


@require_GET
@dashboard_login_required
def queues(request: HtmxHttpRequest) -> HttpResponse:
    memberships = memberships_of(request.user)
    filter_form = QueueFilterForm(request.GET)
    filters = filter_form.filters()
    teams = teams_of(request.user, slug=filters.team)
    now = timezone.now()
    # A queue's further pages: ?<queue>_after=<the key of the last row of the page before>.
    try:
        after = {
            queue.key: queries.queue_cursor_decode(queue, request.GET[f"{queue.key}_after"])
            for queue in queries.STEP_QUEUES
            if request.GET.get(f"{queue.key}_after")
        }
    except queries.BadQueueCursor:
        return HttpResponseBadRequest("No such place in the queue; reload the page.")
    # The memberships already name the teams: no query per queue for them.
    team_ids = [m.team_id for m in memberships if not filters.team or m.team.slug == filters.team]
    quarantine = queries.quarantined(teams, filters, now)
    step_queues = [
        queries.step_queue(teams, queue, filters, now, team_ids=team_ids, after=after.get(queue.key))
        for queue in queries.STEP_QUEUES
    ]
    halted_tools = queries.halted_tools(teams, filters, now)
    groups = for_you.user_groups(request.user)
    for view in step_queues:
        if view.queue.key == "approvals":
            view.rows = for_you.mark_rows(view.rows, memberships, groups)
    context: dict[str, object] = {
        "filter_form": filter_form,
        "filters": filters,
        "memberships": memberships,
        "multi_team": len(memberships) > 1,
        "deciding_team_ids": {m.team_id for m in memberships if m.can_decide},
        "step_queues": step_queues,
        "halted_tools": halted_tools,
        "away": away_in_teams(team_ids, now),  # contract §12: the queues say who is away
        "quarantine": list(quarantine[:20]),
        "quarantine_total": queries.capped_count(quarantine),
        "choices": queries.filter_choices(teams),
        "age_choices": AGE_CHOICES,
        "now": now,
    }
    if not filters.active:
        # The navigation's counts are this page's totals, unfiltered: not counted twice.
        context["nav_counts_known"] = {
            **{view.queue.key: view.total for view in step_queues},
            "halted": min(len(halted_tools), queries.COUNT_CAP),
        }
    partial = "queues" if htmx_targets(request, "queues") else None
    return page_render(request, "approvals/queues.html", context, partial=partial)


@require_GET
@dashboard_login_required
def queue_counts(request: HtmxHttpRequest) -> HttpResponse:
    counts = queries.queue_counts(teams_of(request.user), timezone.now())
    counts["for_you"] = queries.capped_count(
        for_you.for_you(memberships_of(request.user), for_you.user_groups(request.user))
    )
    return page_render(request, "approvals/_nav_counts.html", {"counts": counts})


# --- search ------------------------------------------------------------------------------------


@require_GET
@dashboard_login_required
def search(request: HtmxHttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:200]
    memberships = memberships_of(request.user)
    result = None
    if "\x00" in query:
        # No stored id holds a NUL (PostgreSQL refuses one as a parameter): nothing matches.
        result = queries.SearchResult(exact=[], others=[], partial_span=queries.PARTIAL_SEARCH_SPAN)
    elif query:
        result = queries.search_steps(teams_of(request.user), query)
        if result.single is not None:
            return redirect("approvals:step", pk=result.single.pk)
        queries.with_input_summaries(result.steps)
    context = {
        "query": query,
        "result": result,
        "multi_team": len(memberships) > 1,
        "now": timezone.now(),
    }
    return page_render(request, "approvals/search.html", context)


# --- the step page and decisions ---------------------------------------------------------------


def _visible_step(request: HttpRequest, pk: int) -> tuple[Step, Membership | None]:
    step = get_object_or_404(queries.visible_steps(request.user), pk=pk)
    membership = membership_in(memberships_of(request.user), step.team_id)
    if membership is None:  # visible_steps already requires it; never show without one
        raise Http404
    return step, membership


def _step_context(
    request: HttpRequest,
    step: Step,
    membership: Membership | None,
    *,
    form: DecisionForm | None = None,
    feedback: Feedback | None = None,
    page: timeline.TimelinePage | None = None,
    similar: SimilarPanel | None = None,
) -> dict[str, Any]:
    envelope = step.last_envelope
    page = page or timeline.step_timeline(step)
    proposal = proposal_of(step)
    tree = inputs.input_tree(proposal.input) if proposal is not None and proposal.input is not None else None
    # A refused "Edit and approve" keeps the reviewer's text and opens its own form again.
    edit_form = form if form is not None and form.data.get("edit") else None
    edit_text = ""
    if edit_form is not None:
        edit_text = edit_form.data.get("input", "")
    elif proposal is not None and proposal.input is not None and proposal.editable:
        edit_text = inputs.input_pretty(proposal.input)
    return {
        "proposal": proposal,
        "edit_form": edit_form,
        "edit_text": edit_text,
        "input_tree": tree,
        "comparison": inputs.compare(proposal, previous_proposal(step, proposal)) if proposal is not None else None,
        "step": step,
        "trace_url": trace_url(step.trace_id),
        "membership": membership,
        "multi_team": len(memberships_of(request.user)) > 1,
        "envelope": envelope,
        "envelope_suspicious": bool(envelope and "suspicious_text" in (envelope.flags or [])),
        "panel": decision_panel(step, membership, request.user, proposal),  # type: ignore[arg-type]
        "page": page,
        "timeline": page.entries,
        # The latest events poll for changes; a page of older events (?before=) stands still.
        "live": page.before is None,
        "version": timeline.timeline_version(step),
        "tool_halted": step.tool.is_halted(),
        "form": form if edit_form is None else None,
        "feedback": feedback,
        "now": timezone.now(),
        "similar": similar or similar_default(step, proposal, membership),
    }


@require_GET
@dashboard_login_required
def step_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The step page. Its timeline shows the latest events and polls (`step-live`, every 5 s):
    the poll names the version it shows and gets 204, no body, while nothing changed. "Show
    older" brings the page before a cursor (`timeline-older` with htmx, else the whole page)."""
    step, membership = _visible_step(request, pk)
    before = timeline.Cursor.parse(request.GET.get("before", ""))
    if htmx_targets(request, "step-live"):
        version = timeline.timeline_version(step)
        if request.GET.get("v") == version:
            return _no_change()
        since = timeline.Cursor.parse(request.GET.get("since", ""))
        page = timeline.step_timeline(step, since=since, has_older=request.GET.get("older") == "1")
        # The poll re-renders the timeline only: nothing else of the page is read.
        seen = request.GET.get("seen", "")
        context = {
            "step": step,
            "page": page,
            "live": True,
            "version": version,
            "moved_since": bool(seen) and seen != step.state,
            "seen_state": seen,
            "now": timezone.now(),
        }
        return page_render(request, "approvals/step.html", context, partial="step-live")
    if htmx_targets(request, "timeline-older"):
        if before is None:
            return HttpResponseBadRequest("No such place in the timeline; reload the page.")
        page = timeline.step_timeline(step, before=before)
        context = {"step": step, "page": page, "live": True, "now": timezone.now()}
        return page_render(request, "approvals/_timeline.html", context, partial="timeline-older")
    context = _step_context(request, step, membership, page=timeline.step_timeline(step, before=before))
    return page_render(request, "approvals/step.html", context)


def _no_change() -> HttpResponse:
    # htmx swaps nothing on a 204 (its default responseHandling), so the page stays as it is.
    response = HttpResponse(status=204)
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    response["Cache-Control"] = "no-cache"
    return response


_DONE = {
    "approve": "Approved. The agent may now make one attempt with the approved input.",
    "reject": "Rejected. The step is cancelled.",
    "mark_committed": "Marked committed. The step succeeded and will not be retried.",
    "permit_retry": "Retry permitted. The agent may try again.",
    "cancel": "Step cancelled.",
}


def _decided(result: DecisionResult, *, edit_asked: bool) -> Feedback:
    decision, required = result.decision, result.step.approvals_required
    unchanged = ""
    if edit_asked and not decision.edited:
        unchanged = " Your edit changed nothing, so you approved the agent's input."
    if decision.action == "approve" and not result.transitioned:
        which = " of your edited input" if decision.edited else ""
        return Feedback(
            "info",
            f"Your approval{which} is recorded ({result.approvals_so_far} of {required}). A second reviewer "
            f"must approve the same input before the agent may proceed.{unchanged}",
        )
    if decision.edited:
        return Feedback(
            "success",
            "Approved with your edits. The agent may now make one attempt, and only with your input "
            f"(fingerprint {decision.input_fingerprint[:12]}…): the directive carries it.",
        )
    return Feedback("success", _DONE[decision.action] + unchanged)


def _form_refused(
    request: HtmxHttpRequest, step: Step, membership: Membership | None, form: DecisionForm
) -> HttpResponse:
    context = _step_context(request, step, membership, form=form)
    if request.htmx:
        return page_render(request, "approvals/step.html", context, partial="step-detail")
    return page_render(request, "approvals/step.html", context, status=422)


@require_POST
@dashboard_login_required
def step_decide_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    step, membership = _visible_step(request, pk)
    if membership is None or not membership.can_decide:
        raise PermissionDenied("Only reviewers and admins of this team may decide.")
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _form_refused(request, step, membership, form)

    action = form.cleaned_data["action"]
    edited_input = form.cleaned_data["edited_input"]
    try:
        result = step_decide(
            team=step.team,
            step_id=step.pk,
            actor=request.user,  # type: ignore[arg-type]
            action=action,
            reason=form.cleaned_data["reason"],
            expected_state=form.cleaned_data["expected_state"],
            expected_since=form.cleaned_data["expected_since"],
            edited_input=edited_input,
        )
    except PermissionError as refused:
        raise PermissionDenied(str(refused)) from refused
    except StepNotFound as missing:
        raise Http404 from missing
    except InputRefused as refused:
        # The service's own checks (the proposal became uneditable meanwhile, or a rule the form
        # does not know yet): said on the form, like the form's own refusals.
        form.add_error("input", f"{refused} Nothing was approved.")
        return _form_refused(request, step, membership, form)
    except DecisionRefused as refused:
        feedback = Feedback("error", str(refused), already_decided=refused.already_decided)
    else:
        feedback = _decided(result, edit_asked=edited_input is not None)

    if request.htmx:
        step, membership = _visible_step(request, pk)
        context = _step_context(request, step, membership, feedback=feedback)
        response = page_render(request, "approvals/step.html", context, partial="step-detail")
        return trigger_client_event(response, QUEUES_CHANGED)
    level = {"success": messages.SUCCESS, "info": messages.INFO, "error": messages.ERROR}
    messages.add_message(request, level[feedback.level], feedback.text)
    return HttpResponseRedirect(reverse("approvals:step", args=[step.pk]), status=303)


# --- a halted tool's case ----------------------------------------------------------------------


def _member_tools(request: HttpRequest, name: str, team_slug: str) -> list[Tool]:
    tools = tools_of(request.user, name, team_slug=team_slug)
    if not tools:
        raise Http404
    return tools


def _tool_membership(request: HttpRequest, tool: Tool) -> Membership:
    membership = membership_in(memberships_of(request.user), tool.team_id)
    if membership is None:
        raise Http404
    return membership


@require_GET
@dashboard_login_required
def tool_incident(request: HtmxHttpRequest, tool: str) -> HttpResponse:
    tools = _member_tools(request, tool, request.GET.get("team", ""))
    if len(tools) > 1:
        # The same tool name in several of the user's teams: let them pick one.
        return page_render(request, "approvals/tool_choose.html", {"tools": tools, "name": tool})
    found = tools[0]
    membership = _tool_membership(request, found)
    held = queries.tool_held_steps(found)
    context = {
        "tool": found,
        "membership": membership,
        "halted": found.is_halted(),
        "held_steps": queries.with_input_summaries(list(held[: queries.QUEUE_LIMIT])),
        "held_total": held.count(),
        "history": queries.tool_circuit_history(found),
        "now": timezone.now(),
    }
    return page_render(request, "approvals/tool_incident.html", context)


def _tool_for_post(request: HttpRequest, tool: str) -> tuple[Tool, Membership]:
    team_slug = request.POST.get("team", "")
    if not team_slug:
        raise Http404
    found = _member_tools(request, tool, team_slug)[0]
    membership = _tool_membership(request, found)
    if not membership.can_decide:
        raise PermissionDenied("Only reviewers and admins of this team may decide.")
    return found, membership


def _incident_url(tool: Tool) -> str:
    return f"{reverse('approvals:tool-incident', args=[tool.name])}?team={tool.team.slug}"


@require_POST
@dashboard_login_required
def tool_resume(request: HtmxHttpRequest, tool: str) -> HttpResponse:
    found, _ = _tool_for_post(request, tool)
    form = ToolResumeForm(request.POST)
    back = _safe_next(request, _incident_url(found))
    if not form.is_valid():
        messages.error(request, "The resume form was incomplete; nothing changed.")
        return _redirect(request, back)
    if not found.is_halted():
        messages.info(request, f"{found.name} is not halted; nothing changed.")
        return _redirect(request, back)
    try:
        tool_resume_by_reviewer(
            team=found.team, tool=found, actor=request.user, reason=form.cleaned_data["reason"]  # type: ignore[arg-type]
        )
    except PermissionError as refused:
        raise PermissionDenied(str(refused)) from refused
    messages.success(request, f"{found.name} resumed: agents may call it again.")
    return _redirect(request, back)


@require_POST
@dashboard_login_required
def tool_cancel_held(request: HtmxHttpRequest, tool: str) -> HttpResponse:
    found, _ = _tool_for_post(request, tool)
    form = ToolCancelHeldForm(request.POST)
    back = _safe_next(request, _incident_url(found))
    if not form.is_valid():
        messages.error(request, "A reason is required to cancel all held steps; nothing changed.")
        return _redirect(request, back)
    try:
        result = tool_cancel_held_steps(
            team=found.team, tool=found, actor=request.user, reason=form.cleaned_data["reason"]  # type: ignore[arg-type]
        )
    except PermissionError as refused:
        raise PermissionDenied(str(refused)) from refused
    except DecisionRefused as refused:
        messages.error(request, str(refused))
        return _redirect(request, back)
    if result.queued:
        messages.info(
            request,
            f"Cancelling {result.queued} held steps of {found.name}: under way in the background, each step "
            "with its own audit entry. Reload this page to follow it; a resume stops it.",
        )
    elif result.resumed_midway:
        messages.warning(
            request,
            f"{found.name} was resumed part way: cancelled {_steps(result.cancelled)}; the others stay held. "
            "Decide them one by one.",
        )
    else:
        messages.success(request, f"Cancelled {_steps(result.cancelled)} of {found.name}.")
    return _redirect(request, back)


def _steps(count: int) -> str:
    return f"{count} held step" if count == 1 else f"{count} held steps"


# --- a team's API keys ----------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@dashboard_login_required
def api_keys(request: HtmxHttpRequest) -> HttpResponse:
    """The keys of the user's teams: every member sees their prefixes, a team's admins create
    and revoke them. A new key is shown once, in the answer to the POST that made it (never in
    a URL, a flash message or the session), and that answer is not cached; posting the same
    form again (a reload) creates nothing (dashboard/once.py)."""
    memberships = memberships_of(request.user)
    form, shown, repeated, status = ApiKeyCreateForm(), None, False, 200
    if request.method == "POST":
        form = ApiKeyCreateForm(request.POST)
        if not form.is_valid():
            status = 400
        else:
            team = next((m.team for m in memberships if m.team.slug == form.cleaned_data["team"]), None)
            if team is None:
                raise Http404("No such team.")
            if once_claim(user_id=request.user.pk, purpose="api-key", token=form.cleaned_data["once"]):
                try:
                    created = api_key_create_by_admin(team=team, actor=request.user, name=form.cleaned_data["name"])  # type: ignore[arg-type]
                except PermissionError as refused:
                    raise PermissionDenied(str(refused)) from refused
                shown = ShownOnce(
                    secret=created.raw,
                    heading=f"New key for {team.slug}: {created.api_key.name}",
                    advice="Copy it now: it is not stored and will not be shown again.",
                    name="key",
                    code_id="new-api-key",
                    copy_label="Copy the new API key",
                )
            else:
                repeated = True
            form = ApiKeyCreateForm()
    keys = ApiKey.objects.filter(team__in=[m.team for m in memberships]).select_related("team")
    context = {
        "page": Paginator(keys.order_by("team__slug", "-created_at", "-pk"), 100).get_page(request.GET.get("page")),
        "form": form,
        "once": once_token(),
        "shown": shown,
        "repeated": repeated,
        "admin_teams": [m.team for m in memberships if m.can_administer],
        "admin_team_ids": {m.team_id for m in memberships if m.can_administer},
        "multi_team": len(memberships) > 1,
    }
    response = page_render(request, "approvals/api_keys.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@dashboard_login_required
def api_key_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(ApiKey.objects.select_related("team"), pk=pk, team__in=teams_of(request.user))
    try:
        revoked = api_key_revoke_by_admin(team=key.team, key_id=key.pk, actor=request.user)  # type: ignore[arg-type]
    except PermissionError as refused:
        raise PermissionDenied(str(refused)) from refused
    if revoked:
        messages.success(request, f"Revoked {key.prefix}… ({key.name}): its next request answers 401.")
    else:
        messages.info(request, f"{key.prefix}… was already revoked; nothing changed.")
    return _redirect(request, reverse("approvals:api-keys"))
