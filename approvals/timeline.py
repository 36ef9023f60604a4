"""The step page's timeline (contract §7): envelopes, attempts, audit links, decisions, circuit
events, webhook tries and notifications of one step, by time, one page at a time.

The page polls every 5 s, so no read here grows with the step's history: each source is read
newest first with a LIMIT, the sources are merged, and older entries come a page at a time
("Show older"). A poll whose `version` still matches is answered with no body (views.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from envelopes.models import Attempt, AuditEvent, Decision, ProposedInput, Step
from notifications.models import SendTry
from webhooks.models import DeliveryTry

from .inputs import ShownChange, input_changes

PAGE_SIZE = 50
# A live refresh re-reads what the page shows: the latest page plus the older pages the reviewer
# opened, up to this many entries (beyond it the oldest ones give way to a "Show older" link).
LIVE_LIMIT = 10 * PAGE_SIZE

# What the timeline shows of a webhook try (never the endpoint's secret).
_DELIVERY_FIELDS = (
    "number",
    "tried_at",
    "status_code",
    "latency_ms",
    "error",
    "message__event_type",
    "message__status",
    "message__tries",
    "message__endpoint__url",
)


@dataclass(frozen=True)
class Source:
    """One table the timeline reads. Entries written at the same instant are ordered by rank,
    then by source name, then by primary key: (at, rank, name, pk) orders every entry."""

    name: str
    rank: int
    at_field: str


ENVELOPES = Source("envelope", 0, "received_at")
ATTEMPTS = Source("attempt", 0, "granted_at")
DECISIONS = Source("decision", 1, "decided_at")
AUDIT = Source("audit", 2, "created_at")  # the step's transitions and refusals
CIRCUIT = Source("circuit", 2, "created_at")  # the tool halted and resumed while the step lived
WEBHOOKS = Source("webhook", 3, "tried_at")
NOTIFICATIONS = Source("notification", 3, "tried_at")  # "notified <channel>" (contract §9)
SOURCES = {source.name: source for source in (ENVELOPES, ATTEMPTS, DECISIONS, AUDIT, CIRCUIT, WEBHOOKS, NOTIFICATIONS)}


@dataclass(frozen=True, order=True)
class Cursor:
    """A place in the timeline, written into links as `<microseconds>.<rank>.<source>.<pk>`."""

    at_us: int
    rank: int
    source: str
    pk: int

    _PATTERN = re.compile(r"^(\d{1,19})\.(\d)\.([a-z]{1,16})\.(\d{1,19})$")

    @classmethod
    def parse(cls, text: str) -> Cursor | None:
        """None for anything that is not a cursor this module wrote."""
        match = cls._PATTERN.match(text or "")
        if match is None or match.group(3) not in SOURCES:
            return None
        cursor = cls(int(match.group(1)), int(match.group(2)), match.group(3), int(match.group(4)))
        if SOURCES[cursor.source].rank != cursor.rank or cursor.pk > 2**63 - 1:
            return None
        try:
            cursor.at  # noqa: B018  (a time beyond datetime's range is no cursor)
        except (OverflowError, ValueError, OSError):
            return None
        return cursor

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.at_us // 1_000_000, tz=UTC).replace(microsecond=self.at_us % 1_000_000)

    def __str__(self) -> str:
        return f"{self.at_us}.{self.rank}.{self.source}.{self.pk}"


def _micros(at: datetime) -> int:
    delta = at - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    kind: str  # envelope | attempt | transition | refusal | decision | circuit | webhook
    source: Source
    item: Any
    audit: AuditEvent | None = None
    # An edited approval: what the reviewer changed in the input they were shown.
    edit_changes: tuple[ShownChange, ...] = ()
    edit_more: int = 0

    @property
    def cursor(self) -> Cursor:
        return Cursor(_micros(self.at), self.source.rank, self.source.name, self.item.pk)


@dataclass(frozen=True)
class TimelinePage:
    entries: list[TimelineEntry]  # oldest first
    has_older: bool  # entries before the first one exist ("Show older")
    before: Cursor | None  # the page ends before this place; None: it runs to the newest entry

    @property
    def oldest(self) -> Cursor | None:
        return self.entries[0].cursor if self.entries else None


def _before(source: Source, cursor: Cursor) -> Q:
    """This source's rows that come strictly before `cursor`."""
    earlier = Q(**{f"{source.at_field}__lt": cursor.at})
    same_instant = Q(**{source.at_field: cursor.at})
    if (source.rank, source.name) < (cursor.rank, cursor.source):
        return earlier | same_instant
    if (source.rank, source.name) == (cursor.rank, cursor.source):
        return earlier | (same_instant & Q(pk__lt=cursor.pk))
    return earlier


def _at_or_after(source: Source, cursor: Cursor) -> Q:
    """This source's rows at `cursor` or after it."""
    later = Q(**{f"{source.at_field}__gt": cursor.at})
    same_instant = Q(**{source.at_field: cursor.at})
    if (source.rank, source.name) > (cursor.rank, cursor.source):
        return later | same_instant
    if (source.rank, source.name) == (cursor.rank, cursor.source):
        return later | (same_instant & Q(pk__gte=cursor.pk))
    return later


def _sources(step: Step) -> list[tuple[Source, QuerySet[Any]]]:
    until = step.updated_at if step.terminal else timezone.now()
    return [
        (ENVELOPES, step.envelopes.all()),
        (ATTEMPTS, step.attempt_set.defer("input")),  # the input is the proposal's, read once by the page
        (DECISIONS, Decision.objects.filter(step=step).select_related("reviewer", "on_behalf_of")),
        (AUDIT, step.audit_events.exclude(kind=AuditEvent.Kind.DECISION)),
        (
            CIRCUIT,
            AuditEvent.objects.filter(
                tool_id=step.tool_id,
                kind=AuditEvent.Kind.CIRCUIT,
                created_at__gte=step.created_at,
                created_at__lte=until,
            ),
        ),
        (
            WEBHOOKS,
            DeliveryTry.objects.for_step(step).select_related("message", "message__endpoint").only(*_DELIVERY_FIELDS),
        ),
        (NOTIFICATIONS, SendTry.objects.for_step(step).select_related("message", "message__channel")),
    ]


def _entry(source: Source, item: Any) -> TimelineEntry:
    kind = item.kind if source is AUDIT else source.name
    return TimelineEntry(getattr(item, source.at_field), kind, source, item)


def step_timeline(
    step: Step, *, before: Cursor | None = None, since: Cursor | None = None, has_older: bool = False
) -> TimelinePage:
    """The newest PAGE_SIZE entries before `before` (default: the newest of all); or, with
    `since` (a live refresh), every entry from `since` on, at most LIVE_LIMIT, where
    `has_older` says what the page knew: that entries before `since` exist. One query per
    source, each with a LIMIT."""
    limit = PAGE_SIZE if since is None else LIVE_LIMIT
    newest_first: list[TimelineEntry] = []
    for source, rows in _sources(step):
        if before is not None:
            rows = rows.filter(_before(source, before))
        if since is not None:
            rows = rows.filter(_at_or_after(source, since))
        rows = rows.order_by(f"-{source.at_field}", "-pk")[: limit + 1]
        newest_first.extend(_entry(source, item) for item in rows)
    newest_first.sort(key=lambda entry: entry.cursor, reverse=True)
    page = _with_edit_changes(step, _with_decision_audits(step, newest_first[:limit]))
    return TimelinePage(
        entries=page[::-1], has_older=len(newest_first) > limit or (since is not None and has_older), before=before
    )


def _with_decision_audits(step: Step, entries: list[TimelineEntry]) -> list[TimelineEntry]:
    """Each decision with its own audit link (same actor, same instant): one query a page."""
    decided = {entry.at for entry in entries if entry.kind == "decision"}
    if not decided:
        return entries
    links = AuditEvent.objects.filter(step=step, kind=AuditEvent.Kind.DECISION, created_at__in=decided).only(
        "actor", "created_at", "seq", "hash"
    )
    by_actor_and_time = {(link.actor, link.created_at): link for link in links}
    return [
        replace(entry, audit=by_actor_and_time.get((entry.item.decider, entry.at)))
        if entry.kind == "decision"
        else entry
        for entry in entries
    ]


def _input_before(step: Step, at: datetime) -> dict[str, Any] | None:
    """The input a reviewer was shown at `at`: the latest one the agent sent before then, with a
    granted attempt or with a request the gate refused (envelopes.proposal)."""
    attempt = Attempt.objects.filter(step_id=step.pk, granted_at__lte=at).order_by("-number").first()
    refused = ProposedInput.objects.filter(step_id=step.pk, proposed_at__lte=at).order_by("-proposed_at", "-id").first()
    if refused is not None and (attempt is None or refused.proposed_at > attempt.granted_at):
        return refused.input  # type: ignore[no-any-return]
    return attempt.input if attempt is not None else None


def _with_edit_changes(step: Step, entries: list[TimelineEntry]) -> list[TimelineEntry]:
    """Each edited approval with what it changed. Edits are rare (one releases the step, or
    waits for a second reviewer), and a page holds at most PAGE_SIZE of them: two indexed reads
    each."""
    shown = []
    for entry in entries:
        decision = entry.item if entry.kind == "decision" else None
        if decision is not None and decision.edited and decision.edited_input is not None:
            changes, more = input_changes(_input_before(step, decision.decided_at), decision.edited_input)
            entry = replace(entry, edit_changes=tuple(changes), edit_more=more)
        shown.append(entry)
    return shown


def timeline_version(step: Step) -> str:
    """Changes whenever the timeline of the step (or the step itself) may have changed: every
    write to a step bumps its version, the tool's circuit events advance its audit chain, and
    webhook tries and notification sends are counted by their newest id."""
    newest_try = DeliveryTry.objects.for_step(step).order_by("-pk").values_list("pk", flat=True).first()
    newest_send = SendTry.objects.for_step(step).order_by("-pk").values_list("pk", flat=True).first()
    return f"{step.version}.{step.tool.audit_seq}.{newest_try or 0}.{newest_send or 0}"
