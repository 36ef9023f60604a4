"""Reads for the dashboard. Every query starts from the teams the user is a member of."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.core.paginator import Paginator
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery, TextField
from django.db.models.functions import Cast, Coalesce, Left
from django.utils.functional import cached_property

from dashboard.shell import teams_of
from envelopes.lifecycle import HELD, State, allowed_reviewer_actions
from envelopes.models import Attempt, AuditEvent, Envelope, ProposedInput, Quarantine, Step, Team, Tool
from envelopes.proposal import Proposal

from .inputs import SUMMARY_SOURCE_CHARS, ShownChange, input_changes, input_pretty, input_summary
from .models import Decision, Membership

QUEUE_LIMIT = 50
# Counts in the navigation (refreshed every 5 s by every open dashboard) and in the queue
# headings stop here and read "1000+": counting every held step would cost what the table holds.
COUNT_CAP = 1000
PARTIAL_SEARCH_SPAN = 10_000  # the latest steps a substring search looks through
CHOICES_LIMIT = 200  # tools and codes the filter form offers; the fields also take any text
QUARANTINE_RECENT = timedelta(hours=24)
AGE_RE = re.compile(r"^(\d{1,5})([mhd])$")
_AGE_UNITS = {"m": "minutes", "h": "hours", "d": "days"}

# The decision buttons of contract §7, in the order a reviewer reads them.
ACTION_LABELS = {
    "approve": "Approve",
    "reject": "Reject",
    "mark_committed": "Mark committed",
    "permit_retry": "Permit retry",
    "cancel": "Cancel step",
}
ACTION_HELP = {
    "approve": "The agent may make one attempt, with the input that asked for approval.",
    "reject": "Refuse the request: the step is cancelled and the agent must not write.",
    "mark_committed": "The write did happen: the step succeeds and is never retried.",
    "permit_retry": "The write did not happen: the agent may try again. "
    "If it did happen, a retry writes twice.",
    "cancel": "Stop the step: it is cancelled and the agent must not write.",
}


@dataclass(frozen=True)
class Queue:
    key: str
    title: str
    states: tuple[State, ...]
    empty: str
    order_by: tuple[str, ...]
    read_only: bool = False


STEP_QUEUES = (
    Queue(
        "approvals",
        "Approvals",
        (State.AWAITING_APPROVAL,),
        "No steps wait for approval.",
        ("expires_at", "state_entered_at", "id"),
    ),
    Queue(
        "verifications",
        "Verifications",
        (State.VERIFYING,),
        "No steps wait for verification.",
        ("deadline", "state_entered_at", "id"),
    ),
    Queue(
        "escalations",
        "Escalations",
        (State.ESCALATED,),
        "No steps are escalated.",
        ("state_entered_at", "id"),
    ),
    Queue(
        "waiting",
        "Needs input and waiting",
        (State.NEEDS_INPUT, State.WAITING_RETRY),
        "No steps wait for corrected input or for a retry time.",
        ("state_entered_at", "id"),
        read_only=True,
    ),
)


# --- who sees what -----------------------------------------------------------------------------


def visible_steps(user: User | AnonymousUser) -> QuerySet[Step]:
    return Step.objects.filter(team__in=teams_of(user)).select_related("team", "tool", "last_envelope")


# --- filters -----------------------------------------------------------------------------------


def parse_age(value: str) -> timedelta | None:
    """`15m`, `4h`, `2d`: older than that. Anything else: no age filter."""
    match = AGE_RE.match(value or "")
    if match is None:
        return None
    return timedelta(**{_AGE_UNITS[match.group(2)]: int(match.group(1))})


@dataclass(frozen=True)
class QueueFilters:
    team: str = ""
    tool: str = ""
    code: str = ""
    age: timedelta | None = None

    @property
    def active(self) -> bool:
        return bool(self.team or self.tool or self.code or self.age)


def _filter_steps(steps: QuerySet[Step], filters: QueueFilters, now: datetime) -> QuerySet[Step]:
    if filters.tool:
        steps = steps.filter(tool__name=filters.tool)
    if filters.code:
        steps = steps.filter(last_envelope__code__iexact=filters.code)
    if filters.age:
        steps = steps.filter(state_entered_at__lte=now - filters.age)
    return steps


# --- queues ------------------------------------------------------------------------------------


@dataclass
class QueueView:
    queue: Queue
    rows: list[Any]
    total: int

    @property
    def truncated(self) -> bool:
        return self.total > len(self.rows)


def _current_approvals(*, edited: bool) -> Count:
    # Approvals given since the binding's review started (earlier rounds do not count;
    # Step.approvals_count_since), per input (contract §3): of the input under review,
    # or the edited inputs waiting for a second reviewer (how many distinct edits).
    current = Q(
        decisions__action="approve",
        decisions__decided_at__gte=Coalesce(F("review_started_at"), F("state_entered_at")),
    )
    if edited:
        return Count("decisions__input_fingerprint", filter=current & Q(decisions__edited=True), distinct=True)
    return Count(
        "decisions__reviewer",
        filter=current & Q(decisions__edited=False, decisions__input_fingerprint=F("approval_fingerprint")),
        distinct=True,
    )


def step_queue(
    teams: QuerySet[Team], queue: Queue, filters: QueueFilters, now: datetime
) -> QueueView:
    steps: QuerySet[Step] = Step.objects.filter(team__in=teams, state__in=[s.value for s in queue.states])
    steps = _filter_steps(steps, filters, now)
    total = capped_count(steps)
    rows = steps.select_related("team", "tool", "last_envelope").order_by(*queue.order_by)
    if queue.key == "approvals":
        rows = rows.annotate(
            approvals_given=_current_approvals(edited=False), edits_waiting=_current_approvals(edited=True)
        )
    shown = list(rows[:QUEUE_LIMIT])
    with_input_summaries(shown)
    return QueueView(queue=queue, rows=shown, total=total)


def _input_head(rows: QuerySet[Any]) -> Subquery:
    # The beginning of the stored JSON text: enough for one line, however large the input.
    return Subquery(rows.annotate(head=Left(Cast("input", TextField()), SUMMARY_SOURCE_CHARS)).values("head")[:1])


def with_input_summaries(steps: list[Step]) -> list[Step]:
    """Set `input_summary` on each step: a line from its proposal's input (the one
    `envelopes.proposal.proposal_of` picks), "" without one. One query for the rows shown,
    reading a bounded prefix of each input."""
    for step in steps:
        step.input_summary = ""  # type: ignore[attr-defined]
    with_attempts = [step.pk for step in steps if step.last_fingerprint]
    if not with_attempts:
        return steps
    latest = Attempt.objects.filter(step=OuterRef("pk")).order_by("-number")
    refused = ProposedInput.objects.filter(step=OuterRef("pk"), fingerprint=OuterRef("approval_fingerprint")).order_by(
        "-id"
    )
    heads = {
        pk: (attempt_head, refused_id, refused_head)
        for pk, attempt_head, refused_id, refused_head in Step.objects.filter(pk__in=with_attempts)
        .annotate(
            attempt_head=_input_head(latest),
            refused_id=Subquery(refused.values("pk")[:1]),
            refused_head=_input_head(refused),
        )
        .values_list("pk", "attempt_head", "refused_id", "refused_head")
    }
    for step in steps:
        if step.pk not in heads:
            continue
        attempt_head, refused_id, refused_head = heads[step.pk]
        # As proposal_of: a refused request's input when the binding names it, else the latest attempt's.
        binds_refused = step.approval_fingerprint and step.approval_fingerprint != step.last_fingerprint
        head = refused_head if binds_refused and refused_id is not None else attempt_head
        step.input_summary = input_summary(head)  # type: ignore[attr-defined]
    return steps


def halted_tools(teams: QuerySet[Team], filters: QueueFilters, now: datetime) -> list[Tool]:
    tools = Tool.objects.filter(team__in=teams).halted(now).select_related("team")
    if filters.tool:
        tools = tools.filter(name=filters.tool)
    if filters.code:
        tools = tools.filter(halted_reason__iexact=filters.code)
    if filters.age:
        tools = tools.filter(halted_at__lte=now - filters.age)
    tools = tools.annotate(
        held_steps=Count("steps", filter=Q(steps__state__in=[s.value for s in HELD]))
    )
    return list(tools.order_by("halted_at", "id"))


def quarantined(teams: QuerySet[Team], filters: QueueFilters, now: datetime) -> QuerySet[Quarantine]:
    items = Quarantine.objects.filter(team__in=teams).select_related("team", "step")
    if filters.tool:
        items = items.filter(tool_name=filters.tool)
    if filters.code:
        items = items.filter(code__iexact=filters.code)
    if filters.age:
        items = items.filter(received_at__lte=now - filters.age)
    return items.order_by("-received_at", "-id")


def capped_count(rows: QuerySet[Any]) -> int:
    """How many rows, up to COUNT_CAP: reads at most COUNT_CAP index entries
    (SELECT COUNT(*) FROM (... LIMIT COUNT_CAP))."""
    return rows.order_by()[:COUNT_CAP].count()


class CappedPaginator(Paginator):
    """Pages over the first COUNT_CAP rows: counting them all would cost what the table holds
    (the filters reach older rows)."""

    @cached_property
    def count(self) -> int:
        assert isinstance(self.object_list, QuerySet)
        return capped_count(self.object_list)


def queue_counts(teams: QuerySet[Team], now: datetime) -> dict[str, int]:
    """The counts in the navigation: unfiltered, over the given teams, each up to COUNT_CAP."""
    counts = {
        queue.key: capped_count(Step.objects.filter(team__in=teams, state__in=[s.value for s in queue.states]))
        for queue in STEP_QUEUES
    }
    counts["halted"] = capped_count(Tool.objects.filter(team__in=teams).halted(now))
    counts["quarantine"] = capped_count(
        Quarantine.objects.filter(team__in=teams, received_at__gte=now - QUARANTINE_RECENT)
    )
    return counts


def filter_choices(teams: QuerySet[Team]) -> dict[str, list[str]]:
    """Tool names and codes the filter form offers."""
    # Distinct and limited in SQL: a team with thousands of held steps sends the form a few
    # dozen names, not a row per step.
    tools = list(
        Tool.objects.filter(team__in=teams).values_list("name", flat=True).distinct().order_by("name")[:CHOICES_LIMIT]
    )
    codes = list(
        Step.objects.filter(team__in=teams, state__in=[s.value for s in HELD])
        .exclude(last_envelope__code="")
        .exclude(last_envelope__isnull=True)
        .values_list("last_envelope__code", flat=True)
        .distinct()
        .order_by("last_envelope__code")[:CHOICES_LIMIT]
    )
    return {"tools": tools, "codes": codes}


# --- search ------------------------------------------------------------------------------------


@dataclass
class SearchResult:
    exact: list[Step]  # matched by operation_ref or correlation_id
    others: list[Step]  # matched by run_id or resource_id
    partial: list[Step] = field(default_factory=list)  # substring matches when nothing matched
    partial_span: int = 0  # ... looked for among this many of the latest steps

    @property
    def single(self) -> Step | None:
        return self.exact[0] if len(self.exact) == 1 else None

    @property
    def steps(self) -> list[Step]:
        seen: set[int] = set()
        ordered = []
        for step in [*self.exact, *self.others, *self.partial]:
            if step.pk not in seen:
                seen.add(step.pk)
                ordered.append(step)
        return ordered


def search_steps(teams: QuerySet[Team], query: str) -> SearchResult:
    steps = Step.objects.filter(team__in=teams).select_related("team", "tool", "last_envelope")
    by_envelope_correlation = Envelope.objects.filter(team__in=teams, correlation_id=query)
    by_attempt_correlation = Attempt.objects.filter(step__team__in=teams, correlation_id=query)
    exact = steps.filter(
        Q(operation_ref=query)
        | Q(correlation_id=query)
        | Q(pk__in=by_envelope_correlation.values("step_id"))
        | Q(pk__in=by_attempt_correlation.values("step_id"))
    ).order_by("-created_at", "-id")
    by_resource = Envelope.objects.filter(team__in=teams, resource_id=query).exclude(resource_id="")
    others = (
        steps.filter(Q(run_id=query) | Q(pk__in=by_resource.values("step_id")))
        .exclude(pk__in=exact.values("pk"))
        .order_by("-created_at", "-id")
    )
    result = SearchResult(
        exact=list(exact[:QUEUE_LIMIT]), others=list(others[:QUEUE_LIMIT]), partial_span=PARTIAL_SEARCH_SPAN
    )
    if not result.exact and not result.others and len(query) >= 3:
        # A substring cannot use an index: look among the latest steps only, so that a search
        # with no match reads PARTIAL_SEARCH_SPAN index entries, not the whole table.
        latest = Step.objects.filter(team__in=teams).order_by("-created_at", "-id").values("pk")[:PARTIAL_SEARCH_SPAN]
        partial = steps.filter(
            Q(pk__in=latest),
            Q(operation_ref__icontains=query) | Q(correlation_id__icontains=query) | Q(run_id__icontains=query),
        ).order_by("-created_at", "-id")
        result.partial = list(partial[:QUEUE_LIMIT])
    return result


# --- the step page -----------------------------------------------------------------------------


@dataclass(frozen=True)
class EditedApproval:
    """An edited input that has approvals but not enough yet (`required_approvals: 2`): another
    reviewer releases the step by approving the same input (contract §3, counted per fingerprint)."""

    fingerprint: str
    edited_input: dict[str, Any]
    approvers: list[str]
    you_approved: bool
    changes: list[ShownChange]  # against the proposal
    more: int

    @property
    def input_text(self) -> str:
        return input_pretty(self.edited_input)


@dataclass(frozen=True)
class DecisionPanel:
    """What the current user may decide on a step, and the four-eyes progress: approvals count
    per input fingerprint, the proposal's and each edited input's apart."""

    step: Step
    can_decide: bool
    actions: list[tuple[str, str, str]]  # (action, label, help)
    required_approvals: int
    approvers: list[str]  # of the proposal's input
    you_approved: bool  # ... of the proposal's input
    edits: list[EditedApproval] = field(default_factory=list)
    can_edit: bool = False  # "Edit and approve" is offered

    @property
    def approvals_given(self) -> int:
        return len(self.approvers)


def decision_panel(step: Step, membership: Membership | None, user: User, proposal: Proposal | None) -> DecisionPanel:
    allowed = allowed_reviewer_actions(State(step.state))
    approvers: list[str] = []
    you_approved = False
    edits: dict[str, list[Decision]] = {}  # an edited input's fingerprint: its approvals
    if "approve" in allowed:
        approvals = (
            Decision.objects.filter(step=step, action="approve", decided_at__gte=step.approvals_count_since)
            .select_related("reviewer")
            .order_by("decided_at", "id")
        )
        for decision in approvals:
            if decision.edited and decision.edited_input is not None:
                edits.setdefault(decision.input_fingerprint, []).append(decision)
                continue
            name = decision.reviewer.get_username()
            if name not in approvers:
                approvers.append(name)
            you_approved = you_approved or decision.reviewer_id == user.pk
    actions = [
        (action, ACTION_LABELS[action], ACTION_HELP[action])
        for action in ACTION_LABELS
        if action in allowed and not (action == "approve" and you_approved)
    ]
    can_decide = bool(membership and membership.can_decide)
    pending = []
    for fingerprint, decisions in edits.items():
        edited_input = decisions[0].edited_input
        assert edited_input is not None
        changes, more = input_changes(proposal.input if proposal else None, edited_input)
        names = list(dict.fromkeys(decision.reviewer.get_username() for decision in decisions))
        you = any(decision.reviewer_id == user.pk for decision in decisions)
        pending.append(EditedApproval(fingerprint, edited_input, names, you, changes, more))
    return DecisionPanel(
        step=step,
        can_decide=can_decide,
        actions=actions,
        required_approvals=step.tool.required_approvals,
        approvers=approvers,
        you_approved=you_approved,
        edits=pending,
        can_edit=can_decide and "approve" in allowed and proposal is not None and proposal.editable,
    )


def tool_held_steps(tool: Tool) -> QuerySet[Step]:
    return (
        Step.objects.filter(team_id=tool.team_id, tool=tool, state__in=[s.value for s in HELD])
        .select_related("team", "tool", "last_envelope")
        .order_by("state_entered_at", "id")
    )


def tool_circuit_history(tool: Tool, limit: int = 20) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(chain=f"tool:{tool.pk}", kind=AuditEvent.Kind.CIRCUIT).order_by(
            "-seq"
        )[:limit]
    )
