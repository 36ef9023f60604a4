"""A step's context, in one read: its tool (registered the first time an agent names it), the step
locked for the transaction, and the ids of the rows the write will take (`_context_sql` on
PostgreSQL, the ORM elsewhere). `transitions.apply_event` plans and writes on top of it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Q, prefetch_related_objects

from accounts.models import Team

from . import idempotency, modelsql, policy_acts
from .errors import ToolLimitReached
from .models import Attempt, Decision, Envelope, ErrorCode, ProposedInput, Step, Tool
from .presenters import decisions_prefetch
from .proposal import proposal_from_rows, proposal_remember


def tool_get_or_register(*, team: Team, name: str) -> Tool:
    """The team's tool of that name, registered with defaults the first time it is named."""
    for tool in Tool.objects.filter(team=team, name=name)[:1]:
        return tool
    try:
        with transaction.atomic():
            return Tool.objects.create(team=team, name=name)
    except IntegrityError:
        return Tool.objects.get(team=team, name=name)


def tool_auto_register(*, team: Team, name: str) -> Tool:
    """The team's tool an envelope or attempt names, registered with defaults the first time,
    unless the team already has HOLDPOINT_MAX_TOOLS_PER_TEAM tools (ToolLimitReached: an agent
    inventing tool names must not grow the team's tables, pages and metrics without bound)."""
    for tool in Tool.objects.filter(team=team, name=name)[:1]:
        return tool
    limit = settings.HOLDPOINT_MAX_TOOLS_PER_TEAM
    try:
        with transaction.atomic():
            # New tools of one team are registered one at a time, so that racing requests cannot
            # pass the cap together (a tool is new once per name: this lock is rarely taken).
            list(Team.objects.select_for_update().filter(pk=team.pk).values_list("pk", flat=True))
            for tool in Tool.objects.filter(team=team, name=name)[:1]:
                return tool  # registered by the request we waited for
            if Tool.objects.filter(team=team).count() >= limit:
                raise ToolLimitReached(
                    f"This team already has {limit} tools, the most that agents may register; "
                    f"{name!r} is not one of them. An admin may configure it, or raise the limit.",
                    errors=[{"field": "tool", "rule": "tool_limit"}],
                )
            return Tool.objects.create(team=team, name=name)
    except IntegrityError:  # configured by an admin meanwhile (configuretool takes no team lock)
        return Tool.objects.get(team=team, name=name)


def mark_without_decisions(step: Step) -> None:
    """The step has no decisions (created in this transaction, or read with a check that it has
    none): what reads its decisions gets an empty list without a query."""
    step._prefetched_objects_cache = {"decisions": _no_decisions()}  # type: ignore[attr-defined]


@functools.cache
def _no_decisions() -> Any:
    """An empty queryset of decisions, built once, known empty (iterating it compiles nothing):
    built per step, `step.decisions.none()` cost a filtered queryset each time."""
    none = Decision.objects.none()
    none._result_cache = []
    return none


def code_is_documented(*, tool: Tool, code: str) -> bool:
    return ErrorCode.objects.filter(Q(tool=tool) | Q(tool__isnull=True), team_id=tool.team_id, code=code).exists()


# --- the step's context: one read ----------------------------------------------------------------


@dataclass
class StepContext:
    """What an event is applied to: the team's step `operation_ref` locked for this transaction
    (None: no such step yet) and its tool, the caller's fresh copy with its circuit state (None:
    the caller names none). `new_step_id` numbers the step the event may create; `envelope_id`
    the envelope an ingest stores; `documented`: whether the ingest's code is in the catalog."""

    team: Team | None  # needed for a new step only
    tool: Tool | None
    step: Step | None
    operation_ref: str = ""
    new_step_id: int | None = None
    envelope_id: int | None = None
    documented: bool = True
    # The team's rules of the tool and live grants, as policy_acts.policy_ids_sql names them.
    rule_versions: str | None = None
    grant_uses: str | None = None


class ToolUnknown(Exception):
    """The team has no tool of this name yet: the caller leaves its transaction (nothing written),
    registers the tool in one of its own (`tool_auto_register` locks the team row, which must not
    be held while the step is written: the step's INSERT checks its team key) and runs again."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def step_context(
    *, team: Team, tool_name: str, operation_ref: str, code: str | None = None, ingest: bool = False
) -> StepContext | None:
    """The context of an ingest (`ingest`: with the envelope's id and whether `code` is
    documented) or of an attempt request, in the caller's transaction; None when the team has
    no tool `tool_name` (the caller registers it and asks again). The step comes with its last
    envelope, its tool, its decisions (or the knowledge that it has none) and its proposal, as
    the answer reads them."""
    if connection.vendor == "postgresql":
        return _context_read(team, tool_name, operation_ref, code if ingest else None, ingest)
    tool = next(iter(Tool.objects.filter(team=team, name=tool_name)[:1]), None)
    if tool is None:
        return None
    step = lock_step(team, operation_ref)
    rule_versions, grant_uses = policy_acts.policy_ids_read(team=team, tool=tool_name)
    return StepContext(
        team=team,
        tool=tool,
        step=step,
        operation_ref=operation_ref,
        new_step_id=modelsql.next_id(Step) if step is None else None,
        documented=ingest and bool(code) and code_is_documented(tool=tool, code=code or ""),
        rule_versions=rule_versions,
        grant_uses=grant_uses,
    )


def lock_step(team: Team, operation_ref: str) -> Step | None:
    """The team's step of that ref, locked for this transaction, with its tool and last envelope
    (None: no such step). (team, operation_ref) is unique: a slice, not `.first()`, which would
    order by pk."""
    steps = Step.objects.select_for_update(of=("self",)).filter(team=team, operation_ref=operation_ref)
    return next(iter(steps.select_related("tool", "last_envelope")[:1]), None)


def _context_read(team: Team, tool_name: str, operation_ref: str, code: str | None, ingest: bool) -> StepContext | None:
    """`_context_sql`'s one read. A statement that waited for the step's lock reads the step as
    the other transaction committed it, but every row it joins (the last envelope, the attempts,
    the decisions) as its snapshot saw them before the wait: stale, and the step would be written
    back with them. The read says when the step it locked is newer than its snapshot, and then
    reads again, the lock ours and its snapshot taken after the other transaction's commit."""
    params = {"team": team.pk, "tool": tool_name, "ref": operation_ref, "code": code or ""}
    claim = idempotency.claim_to_make()
    if claim is None:
        row = modelsql.fetchone_bound(_context_sql(ingest, claiming=False), params)
    else:  # an Idempotency-Key's claim, made in this statement before the step is locked
        try:
            row = modelsql.fetchone_bound(_context_sql(ingest, claiming=True), params | idempotency.claim_params(claim))
        except OperationalError as error:
            idempotency.claim_failed(error)
            raise
        if row is not None:
            idempotency.claim_reported(claim, row[0])
            row = row[1:]
    if row is not None and row[_WAITED]:
        row = modelsql.fetchone_bound(_context_sql(ingest, claiming=False), params)
    if row is None:
        return None
    rule_versions, grant_uses = row[_RULES], row[_GRANTS]
    at = _GRANTS + 1
    tool: Tool = modelsql.from_row(Tool, row[at:])
    at += len(modelsql.column_fields(Tool))
    documented, new_step_id, envelope_id, has_decisions = row[at : at + 4]
    at += 4
    attempt_row = row[at : at + len(modelsql.column_fields(Attempt))]
    at += len(modelsql.column_fields(Attempt))
    refused_row = row[at : at + len(modelsql.column_fields(ProposedInput))]
    at += len(modelsql.column_fields(ProposedInput))
    envelope_row = row[at : at + len(modelsql.column_fields(Envelope))]
    at += len(modelsql.column_fields(Envelope))
    step: Step | None = None
    if row[at] is not None:
        step = modelsql.from_row(Step, row[at:])
        step.team = team  # its tool: the context's, once event_plan checked it is the step's
        if envelope_row[0] is not None:
            step.last_envelope = modelsql.from_row(Envelope, envelope_row)
        if has_decisions:
            prefetch_related_objects([step], decisions_prefetch())
        else:  # no decisions to read: the answer need not ask
            mark_without_decisions(step)
        # proposal.proposal_of, from the rows read above (one rule: proposal.proposal_from_rows).
        attempt = modelsql.from_row(Attempt, attempt_row) if attempt_row[0] is not None else None
        refused = modelsql.from_row(ProposedInput, refused_row) if refused_row[0] is not None else None
        proposal_remember(step, proposal_from_rows(step, attempt=attempt, refused=refused))
    return StepContext(
        team=team,
        tool=tool,
        step=step,
        operation_ref=operation_ref,
        new_step_id=new_step_id,
        envelope_id=envelope_id,
        documented=bool(documented),
        rule_versions=rule_versions,
        grant_uses=grant_uses,
    )


_WAITED, _RULES, _GRANTS = 0, 1, 2  # the context row's first columns

# Whether the step row's version (its xmin, 32 bits) was committed by another transaction after
# the statement's snapshot was taken: it was locked after waiting for its writer. The xmin is
# widened to 64 bits by its signed distance to the snapshot's xmax (live xids are within 2^31 of
# it; a frozen one may read as newer, which only costs a second read); this transaction's own
# versions are in progress, not committed.
_XMAX = "pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
_XMIN = (
    f"(({_XMAX} - ((({_XMAX} % 4294967296) - s.xmin::text::bigint + 2147483648) % 4294967296 - 2147483648))"
    "::text::xid8)"
)
_NEWER_THAN_SNAPSHOT = (
    f"(NOT pg_visible_in_snapshot({_XMIN}, pg_current_snapshot()) AND pg_xact_status({_XMIN}) = 'committed')"
)


@functools.cache
def _context_sql(ingest: bool, *, claiming: bool) -> str:
    """Whether the step was locked after a wait (see `_context_read`), the team's rules and live
    grants of the tool (`policy_acts.policy_ids_sql`), the tool, for an envelope whether its code
    is documented, the new rows' ids, the step locked FOR UPDATE with whether it has decisions,
    what its proposal reads (the latest attempt, or the refused input the binding names:
    proposal.proposal_of) and its last envelope. `claiming`: the Idempotency-Key's claim first
    (`idempotency.claim_ctes`), its id the row's first column; the step is locked after it (the
    lateral reads the claim, so it waits as a plain call would), and only if it was made."""
    step_fk = Decision._meta.get_field("step").column
    q, table = modelsql.quote, modelsql.table
    step_id = f"s.{q('id')}"
    # The tool's own code or a team-wide one: two lookups, each on its partial unique index.
    codes = table(ErrorCode)
    documented = (
        f"(EXISTS (SELECT 1 FROM {codes} c WHERE c.{q('tool_id')} = t.{q('id')} AND c.{q('code')} = %(code)s "  # noqa: S608
        f"AND c.{q('team_id')} = %(team)s) "
        f"OR EXISTS (SELECT 1 FROM {codes} c WHERE c.{q('team_id')} = %(team)s AND c.{q('code')} = %(code)s "
        f"AND c.{q('tool_id')} IS NULL))"
        if ingest
        else "true"
    )
    envelope_id = f"nextval({modelsql.sequence(Envelope)})" if ingest else "NULL::bigint"
    same_step = f"{q('team_id')} = %(team)s AND {q('operation_ref')} = %(ref)s"
    if claiming:
        same_step += " AND claimed.claimed IS NOT NULL"
    claim = f"{idempotency.claim_ctes()} SELECT claimed.claimed, " if claiming else "SELECT "
    return (
        f"{claim}{step_id} IS NOT NULL AND {_NEWER_THAN_SNAPSHOT}, "  # noqa: S608
        f"{policy_acts.policy_ids_sql()}, "
        f"{modelsql.select_list(Tool, 't')}, {documented}, "
        f"CASE WHEN {step_id} IS NULL THEN nextval({modelsql.sequence(Step)}) END, "
        f"{envelope_id}, "
        f"{step_id} IS NOT NULL AND EXISTS (SELECT 1 FROM {table(Decision)} d "
        f"WHERE d.{q(step_fk)} = {step_id}), "
        f"{modelsql.select_list(Attempt, 'a')}, {modelsql.select_list(ProposedInput, 'p')}, "
        f"{modelsql.select_list(Envelope, 'e')}, "
        f"{modelsql.select_list(Step, 's')} "
        f"FROM {'claimed CROSS JOIN ' if claiming else ''}{table(Tool)} t LEFT JOIN LATERAL ("
        f"SELECT *, xmin FROM {table(Step)} WHERE {same_step} FOR UPDATE) s ON true "
        f"LEFT JOIN LATERAL (SELECT * FROM {table(Attempt)} WHERE {q('step_id')} = {step_id} "
        f"AND s.{q('last_fingerprint')} <> '' ORDER BY {q('number')} DESC LIMIT 1) a ON true "
        f"LEFT JOIN LATERAL (SELECT * FROM {table(ProposedInput)} WHERE {q('step_id')} = {step_id} "
        f"AND s.{q('approval_fingerprint')} NOT IN ('', s.{q('last_fingerprint')}) "
        f"AND {q('fingerprint')} = s.{q('approval_fingerprint')} ORDER BY {q('id')} DESC LIMIT 1) p ON true "
        f"LEFT JOIN {table(Envelope)} e ON e.{q('id')} = s.{q('last_envelope_id')} "
        f"WHERE t.{q('team_id')} = %(team)s AND t.{q('name')} = %(tool)s"
    )
