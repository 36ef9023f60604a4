"""Reads for the dashboard. Every query starts from the teams the user is a member of."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Count, F, IntegerField, OuterRef, Q, QuerySet, Subquery, TextField
from django.db.models.functions import Cast, Coalesce, Left
from django.utils.functional import cached_property

from accounts.models import Team
from dashboard.shell import teams_of
from envelopes.models import Attempt, AuditEvent, Envelope, ProposedInput, Quarantine, Step, Tool
from envelopes.states import HELD, State

from .inputs import SUMMARY_SOURCE_CHARS, input_summary

QUEUE_LIMIT = 50
# Counts in the navigation (refreshed every 5 s by every open dashboard) and in the queue
# headings stop here and read "1000+": counting every held step would cost what the table holds.
COUNT_CAP = 1000
PARTIAL_SEARCH_SPAN = 10_000  # the latest steps a substring search looks through
CHOICES_LIMIT = 200  # tools and codes the filter form offers; the fields also take any text
CODES_SPAN = 500  # the held steps whose codes the filter form offers
QUARANTINE_RECENT = timedelta(hours=24)
AGE_RE = re.compile(r"^(\d{1,5})([mhd])$")
_AGE_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


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
    after: tuple[Any, ...] | None = None  # this page starts after that key (a keyset page)
    next_after: tuple[Any, ...] | None = None  # the key of the last row shown, when more follow

    @property
    def truncated(self) -> bool:
        return self.after is not None or self.next_after is not None or self.total > len(self.rows)

    @property
    def cursor_param(self) -> str:
        return f"{self.queue.key}_after"

    @property
    def next_cursor(self) -> str:
        return queue_cursor_encode(self.queue, self.next_after) if self.next_after is not None else ""


class BadQueueCursor(ValueError):
    pass


def queue_cursor_encode(queue: Queue, key: tuple[Any, ...]) -> str:
    values = [value.isoformat() if isinstance(value, datetime) else value for value in key]
    return base64.urlsafe_b64encode(json.dumps(values, separators=(",", ":")).encode()).decode().rstrip("=")


def queue_cursor_decode(queue: Queue, text: str) -> tuple[Any, ...]:
    """The key a `?<queue>_after=` cursor names: the queue's order columns, datetimes (or null
    where the column may be) then the step id. Anything else is BadQueueCursor."""
    try:
        values = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode())
    except (binascii.Error, UnicodeDecodeError, ValueError) as error:
        raise BadQueueCursor("not a queue cursor") from error
    if not isinstance(values, list) or len(values) != len(queue.order_by):
        raise BadQueueCursor("not a queue cursor")
    *times, pk = values
    if type(pk) is not int or not 0 < pk < 2**63:
        raise BadQueueCursor("not a queue cursor")
    key: list[Any] = []
    for name, value in zip(queue.order_by, times, strict=False):
        if value is None and name in NULLABLE_ORDER:
            key.append(None)
            continue
        try:
            moment = datetime.fromisoformat(value) if isinstance(value, str) and len(value) <= 40 else None
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            raise BadQueueCursor("not a queue cursor")
        key.append(moment)
    return (*key, pk)


# Order columns that may be NULL; every queue orders them NULLS LAST, on both engines (SQLite
# puts NULLs first by default), so that a page's keys compare the same in SQL and in Python.
NULLABLE_ORDER = frozenset({"expires_at", "deadline"})


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((value is None, value) for value in key)


def _after(queue: Queue, key: tuple[Any, ...]) -> Q:
    """Rows whose order key comes after `key` (NULLs last): the first column's bound alone, for
    the index scan to start there, and the exact lexicographic comparison."""
    names = queue.order_by
    exact = Q(pk__in=[])
    equal = Q()
    for name, value in zip(names, key, strict=True):
        if value is None:
            equal &= Q(**{f"{name}__isnull": True})
            continue
        later = Q(**{f"{name}__gt": value})
        if name in NULLABLE_ORDER:
            later |= Q(**{f"{name}__isnull": True})
        exact |= equal & later
        equal &= Q(**{name: value})
    first, value = names[0], key[0]
    start = Q(**{f"{first}__isnull": True}) if value is None else Q(**{f"{first}__gte": value})
    if value is not None and first in NULLABLE_ORDER:
        start |= Q(**{f"{first}__isnull": True})
    return start & exact


def _queue_keys(steps: QuerySet[Step], team_ids: list[int], queue: Queue, limit: int) -> list[tuple[Any, ...]]:
    """The order keys (the queue's order columns, the id last) of the first `limit` steps, over
    every team. Each team's steps are read in order from its queue's partial index (Step.Meta)
    and stopped at `limit`, so the cost follows the page, not the queue's length; the teams'
    pages are merged here. On PostgreSQL one statement (UNION ALL of the teams' pages); SQLite
    takes no LIMIT inside a compound statement, so there it is one statement per team."""
    order = [F(name).asc(nulls_last=True) for name in queue.order_by]
    pages = [
        steps.filter(team_id=team_id).order_by(*order).values_list(*queue.order_by)[:limit] for team_id in team_ids
    ]
    if not pages:
        return []
    if len(pages) == 1:
        keys = list(pages[0])
    elif connection.features.supports_slicing_ordering_in_compound:
        keys = list(pages[0].union(*pages[1:], all=True))
    else:
        keys = [key for page in pages for key in page]
    return sorted(keys, key=_sort_key)[:limit]


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
    teams: QuerySet[Team],
    queue: Queue,
    filters: QueueFilters,
    now: datetime,
    *,
    team_ids: list[int] | None = None,
    after: tuple[Any, ...] | None = None,
) -> QueueView:
    """A page of the queue, oldest first: the first QUEUE_LIMIT steps, or those after the key
    `after` (a keyset page: `queue_cursor_decode`). `team_ids`: the ids of `teams`, when the
    caller has them already. Reads a page's worth of rows whatever the queue holds: the count is
    capped, the order comes from the queue's index, and the rows, their joins and their
    approvals are read for the steps shown only."""
    if team_ids is None:
        team_ids = list(teams.values_list("pk", flat=True))
    states = [s.value for s in queue.states]
    steps: QuerySet[Step] = _filter_steps(Step.objects.filter(team_id__in=team_ids, state__in=states), filters, now)
    total = capped_count(steps)
    paged = steps.filter(_after(queue, after)) if after is not None else steps
    keys = _queue_keys(paged, team_ids, queue, QUEUE_LIMIT + 1)
    shown_keys = keys[:QUEUE_LIMIT]
    ids = [key[-1] for key in shown_keys]
    rows = Step.objects.filter(pk__in=ids, state__in=states).select_related("team", "tool", "last_envelope")
    if queue.key == "approvals":
        rows = rows.annotate(
            approvals_given=_current_approvals(edited=False), edits_waiting=_current_approvals(edited=True)
        )
    by_pk = {step.pk: step for step in rows} if ids else {}
    shown = [by_pk[pk] for pk in ids if pk in by_pk]  # a step decided since its key was read is gone
    with_input_summaries(shown)
    next_after = shown_keys[-1] if len(keys) > QUEUE_LIMIT else None
    return QueueView(queue=queue, rows=shown, total=total, after=after, next_after=next_after)


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
    # A halted tool is where held steps pile up: count each one's up to COUNT_CAP ("1000+"),
    # from step_team_tool_state_idx, rather than all of them.
    held = Step.objects.filter(
        team_id=OuterRef("team_id"), tool_id=OuterRef("pk"), state__in=[s.value for s in HELD]
    ).order_by()
    tools = tools.annotate(held_steps=CappedCount(held.values("pk")[:COUNT_CAP]))
    return list(tools.order_by("halted_at", "id"))


class CappedCount(Subquery):
    """COUNT(*) over a sliced subquery: how many rows, up to the slice's end."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) AS capped)"
    output_field = IntegerField()


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


def queue_counts(teams: QuerySet[Team], now: datetime, *, known: dict[str, int] | None = None) -> dict[str, int]:
    """The counts in the navigation: unfiltered, over the given teams, each up to COUNT_CAP.
    `known`: counts the caller has already made the same way (the queues page, unfiltered)."""
    counts = dict(known or {})
    for queue in STEP_QUEUES:
        if queue.key not in counts:
            states = [s.value for s in queue.states]
            counts[queue.key] = capped_count(Step.objects.filter(team__in=teams, state__in=states))
    if "halted" not in counts:
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
    # The codes of up to CODES_SPAN held steps (any of them: read from the held-queue index, in no
    # order), not of every held step, which would read the envelope of each.
    sample = Step.objects.filter(team__in=teams, state__in=[s.value for s in HELD]).order_by().values("pk")[:CODES_SPAN]
    codes = list(
        Step.objects.filter(pk__in=sample)
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


def tool_held_steps(tool: Tool) -> QuerySet[Step]:
    return (
        Step.objects.filter(team_id=tool.team_id, tool=tool, state__in=[s.value for s in HELD])
        .select_related("team", "tool", "last_envelope")
        .order_by("state_entered_at", "id")
    )


def tool_circuit_history(tool: Tool, limit: int = 20) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(chain=f"tool:{tool.pk}", kind=AuditEvent.Kind.CIRCUIT).order_by("-seq")[:limit]
    )
