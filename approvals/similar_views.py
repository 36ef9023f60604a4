"""The step page's "Approve and allow similar" (approvals.similar): the approval with a grant,
and the words of a `when` as the reviewer edits it. Without JavaScript the form still works:
an approval whose `when` was not shown in words yet shows them and saves nothing."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import trigger_client_event

from dashboard.shell import HtmxHttpRequest, dashboard_login_required, page_render
from envelopes.errors import StepNotFound
from envelopes.models import Step
from envelopes.proposal import proposal_of

from .forms import DecisionForm
from .services import DecisionRefused, GrantNotMade
from .similar import (
    WHEN_MAX,
    GrantForm,
    SimilarPanel,
    similar_offered,
    similar_panel,
    step_approve_with_grant,
    words_or_none,
)
from .views import QUEUES_CHANGED, Feedback, _decided, _step_context, _visible_step


def _again(request: HtmxHttpRequest, step: Step, panel: SimilarPanel, *, status: int) -> HttpResponse:
    step, membership = _visible_step(request, step.pk)
    context = _step_context(request, step, membership, similar=panel)
    if request.htmx:
        return page_render(request, "approvals/step.html", context, partial="step-detail")
    return page_render(request, "approvals/step.html", context, status=status)


@require_POST
@dashboard_login_required
def step_approve_similar(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    step, membership = _visible_step(request, pk)
    if membership is None or not membership.can_decide:
        raise PermissionDenied("Only reviewers and admins of this team may decide.")
    proposal = proposal_of(step)
    decision_form, grant_form = DecisionForm(request.POST), GrantForm(request.POST)
    if step.state != "awaiting_approval":
        feedback = Feedback(
            "error",
            f"Already decided: the step is now {step.state.replace('_', ' ')} ({step.reason}).",
            already_decided=True,
        )
        return _answer(request, step, feedback)
    if proposal is None or not similar_offered(step, proposal, can_decide=True):
        feedback = Feedback("error", "Approve and allow similar is not offered on this step. Nothing was saved.")
        return _answer(request, step, feedback)
    valid = decision_form.is_valid() and decision_form.cleaned_data["action"] == "approve"
    if not grant_form.is_valid() or not valid:
        return _again(request, step, similar_panel(proposal, step, grant_form), status=422)
    if not grant_form.words_seen:
        return _again(request, step, similar_panel(proposal, step, grant_form, unconfirmed=True), status=200)
    try:
        approved = step_approve_with_grant(
            team=step.team,
            step_id=step.pk,
            actor=request.user,  # type: ignore[arg-type]
            grant=grant_form.grant(),
            reason=decision_form.cleaned_data["reason"],
            expected_state=decision_form.cleaned_data["expected_state"],
            expected_since=decision_form.cleaned_data["expected_since"],
        )
    except PermissionError as refused:
        raise PermissionDenied(str(refused)) from refused
    except StepNotFound as missing:
        raise Http404 from missing
    except GrantNotMade as refused:
        return _again(request, step, similar_panel(proposal, step, grant_form, refused=str(refused)), status=422)
    except DecisionRefused as refused:
        feedback = Feedback("error", str(refused), already_decided=refused.already_decided)
    else:
        grant = approved.grant
        feedback = Feedback(
            "success",
            f"{_decided(approved.result, edit_asked=False).text} Grant {grant.pk} allows similar calls of "
            f"{grant.tool}: {grant.max_uses} uses at most, until {grant.expires_at:%Y-%m-%d %H:%M} UTC.",
        )
    return _answer(request, step, feedback)


def _answer(request: HtmxHttpRequest, step: Step, feedback: Feedback) -> HttpResponse:
    if request.htmx:
        step, membership = _visible_step(request, step.pk)
        context = _step_context(request, step, membership, feedback=feedback)
        response = page_render(request, "approvals/step.html", context, partial="step-detail")
        return trigger_client_event(response, QUEUES_CHANGED)
    level = {"success": messages.SUCCESS, "info": messages.INFO, "error": messages.ERROR}
    messages.add_message(request, level[feedback.level], feedback.text)
    return HttpResponseRedirect(reverse("approvals:step", args=[step.pk]), status=303)


@require_POST
@dashboard_login_required
def grant_words(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The words of the `when` being edited (htmx, as the reviewer types): the fragment also
    carries the text it read, which the approval then sends back as `shown_when`."""
    step, _ = _visible_step(request, pk)
    when = str(request.POST.get("when", ""))[:WHEN_MAX].strip()
    context = {"step": step, "similar": {"when": when, "words": words_or_none(when)}}
    return page_render(request, "approvals/_approve_similar.html", context, partial="grant-words")
