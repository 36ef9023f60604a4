"""The hot path of the ingest: the common envelope in two SQL statements, between BEGIN and COMMIT.

An agent pays Holdpoint on every write (issue 14), so the common case of `POST /envelopes`
(a canonical envelope for a tool the team has, a new or open step, no service-wide halt or
skipped resource) is applied here with the same pieces as `services.envelope_ingest`
(`schema.parse_envelope`, `lifecycle.advance`, the audit chain's hash, `step_representation`,
the domain-event consumers) but with its round trips folded:

1. one read, in the transaction: the tool, whether the code is documented, the step locked
   FOR UPDATE (if any), whether it has decisions, and the ids of the rows to write
   (`nextval`), so that the audit link's hash and the event's body can be computed first;
2. `transitions.event_plan` (apply_event's work without its writes: the machine's answer
   copied, the audit links hashed), then one statement writing the step (INSERT, or UPDATE of
   the locked row), its audit links, the envelope and the domain event (data-modifying WITH
   queries);
3. the consumers of the event stream, as `events.event_emit` hands the event over: a consumer
   that offers its work as one INSERT (the webhook outbox: `events.Fold`) in that same
   statement, the others (notifications) called after it, in the same transaction.

Anything else (another dialect, a new tool, a rejected or strict-undocumented envelope, a
closed step, a halt, a skipped resource, a race on a new step) answers None before anything
is committed, and the caller runs `services.envelope_ingest`, which handles every case. The
tests in tests/perf check that both paths write the same rows and answer the same.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import prefetch_related_objects
from django.utils import timezone

from . import modelsql, schema
from .errors import AttemptRefused
from .events import Consumer, DomainEvent, Fold, consumers, folder_of
from .lifecycle import TERMINAL
from .models import Attempt, Envelope, ErrorCode, ProposedInput, Step, Team, Tool
from .presenters import decisions_prefetch, step_representation
from .proposal import AcceptedInput, Proposal, proposal_from_rows, proposal_remember
from .services import REFUSAL_DETAIL, AttemptGrant, IngestAnswer, attempt_event, envelope_build, envelope_event
from .transitions import AGENT, Applied, event_plan, mark_without_decisions


class _NotHot(Exception):
    """Not the common case: roll back and let services.envelope_ingest do it."""


def envelope_ingest(*, team: Team, payload: Any, dialect: str, now: datetime | None = None) -> IngestAnswer | None:
    """Ingest one envelope on the hot path; None when it is not the common case (nothing was
    written then: the caller runs `services.envelope_ingest`)."""
    if dialect != "canonical" or connection.vendor != "postgresql":
        return None
    tool_name, operation_ref = schema.identify(payload, dialect)
    code = payload.get("code") if isinstance(payload, dict) else None
    # A code that breaks its pattern (a NUL in it, which PostgreSQL refuses as a parameter) is
    # no common case: the service quarantines it.
    if not tool_name or not operation_ref or not (code is None or re.fullmatch(schema.CODE_PATTERN, str(code))):
        return None
    try:
        with transaction.atomic():
            return _ingest(team, payload, tool_name, operation_ref, code or "", now or timezone.now())
    except (_NotHot, IntegrityError):  # IntegrityError: another request created the step first
        return None


@dataclass
class _Context:
    tool: Tool
    step: Step | None  # locked FOR UPDATE
    documented: bool
    new_step_id: int | None
    envelope_id: int | None


@functools.cache
def _context_sql(ingest: bool) -> str:
    """The tool, the step locked FOR UPDATE with its last envelope, whether it has decisions,
    what its proposal reads (the latest attempt, or the refused input the binding names:
    envelopes.proposal.proposal_of), the new rows' ids, and for an envelope whether its code is
    documented."""
    relation = Step._meta.get_field("decisions")
    decisions = relation.related_model  # the reviewers' app, reached by the relation only
    step_fk = relation.field.column  # type: ignore[union-attr]
    q = modelsql.quote
    step_id = f"s.{q('id')}"
    # The tool's own code or a team-wide one: two lookups, each on its partial unique index.
    codes = modelsql.table(ErrorCode)
    documented = (
        f"(EXISTS (SELECT 1 FROM {codes} c WHERE c.{q('tool_id')} = t.{q('id')} AND c.{q('code')} = %(code)s "  # noqa: S608
        f"AND c.{q('team_id')} = %(team)s) "
        f"OR EXISTS (SELECT 1 FROM {codes} c WHERE c.{q('team_id')} = %(team)s AND c.{q('code')} = %(code)s "
        f"AND c.{q('tool_id')} IS NULL))"
        if ingest
        else "true"
    )
    envelope_id = f"nextval({modelsql.sequence(Envelope)})" if ingest else "NULL::bigint"
    return (
        f"SELECT {modelsql.select_list(Tool, 't')}, {documented}, "  # noqa: S608 (names only)
        f"CASE WHEN {step_id} IS NULL THEN nextval({modelsql.sequence(Step)}) END, "
        f"{envelope_id}, "
        f"{step_id} IS NOT NULL AND EXISTS (SELECT 1 FROM {modelsql.table(decisions)} d "  # type: ignore[arg-type]
        f"WHERE d.{q(step_fk)} = {step_id}), "
        f"{modelsql.select_list(Attempt, 'a')}, {modelsql.select_list(ProposedInput, 'p')}, "
        f"{modelsql.select_list(Envelope, 'e')}, "
        f"{modelsql.select_list(Step, 's')} "
        f"FROM {modelsql.table(Tool)} t LEFT JOIN LATERAL ("
        f"SELECT * FROM {modelsql.table(Step)} WHERE {q('team_id')} = %(team)s AND {q('operation_ref')} = %(ref)s "
        f"FOR UPDATE) s ON true "
        f"LEFT JOIN LATERAL (SELECT * FROM {modelsql.table(Attempt)} WHERE {q('step_id')} = {step_id} "
        f"AND s.{q('last_fingerprint')} <> '' ORDER BY {q('number')} DESC LIMIT 1) a ON true "
        f"LEFT JOIN LATERAL (SELECT * FROM {modelsql.table(ProposedInput)} WHERE {q('step_id')} = {step_id} "
        f"AND s.{q('approval_fingerprint')} NOT IN ('', s.{q('last_fingerprint')}) "
        f"AND {q('fingerprint')} = s.{q('approval_fingerprint')} ORDER BY {q('id')} DESC LIMIT 1) p ON true "
        f"LEFT JOIN {modelsql.table(Envelope)} e ON e.{q('id')} = s.{q('last_envelope_id')} "
        f"WHERE t.{q('team_id')} = %(team)s AND t.{q('name')} = %(tool)s"
    )


def _context(team: Team, tool_name: str, operation_ref: str, *, code: str | None) -> _Context:
    """One read in the caller's transaction (see `_context_sql`); the step comes with its
    decisions' prefetch cache and its proposal remembered, so that its answer reads nothing."""
    row = modelsql.fetchone_bound(
        _context_sql(code is not None),
        {
            "team": team.pk,
            "tool": tool_name,
            "ref": operation_ref,
            "code": code,
        },
    )
    if row is None:
        raise _NotHot("a tool the team does not have yet")
    at = len(modelsql.column_fields(Tool))
    tool: Tool = modelsql.from_row(Tool, row)
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
        step.team = team
        step.last_envelope = None if envelope_row[0] is None else modelsql.from_row(Envelope, envelope_row)
        if has_decisions:
            prefetch_related_objects([step], decisions_prefetch())
        else:  # no decisions to read: the answer need not ask
            mark_without_decisions(step)
        # proposal.proposal_of, from the rows read above (one rule: proposal.proposal_from_rows).
        attempt = modelsql.from_row(Attempt, attempt_row) if attempt_row[0] is not None else None
        refused = modelsql.from_row(ProposedInput, refused_row) if refused_row[0] is not None else None
        proposal_remember(step, proposal_from_rows(step, attempt=attempt, refused=refused))
    return _Context(tool, step, bool(documented), new_step_id, envelope_id)


def _ingest(team: Team, payload: Any, tool_name: str, operation_ref: str, code: str, now: datetime) -> IngestAnswer:
    found = _context(team, tool_name, operation_ref, code=code)
    tool, step, documented = found.tool, found.step, found.documented

    context = schema.ToolContext(
        max_attempts=tool.max_attempts,
        side_effects=tool.side_effects,
        attempts_so_far=0,
        safe_detail_keys=frozenset(tool.safe_detail_keys),
    )
    try:
        parsed = schema.parse_envelope(payload, dialect="canonical", context=context, received_at=now)
    except schema.EnvelopeRejected as rejected:
        raise _NotHot("rejected: the quarantine is the service's") from rejected
    flags = set(parsed.flags)
    documented = True if parsed.ok else documented and (parsed.code or "") == code
    if not documented:
        if tool.strict_codes:
            raise _NotHot("an undocumented code for a strict tool: the quarantine is the service's")
        flags.add("undocumented_code")
    if not parsed.ok and parsed.scope == "service":
        raise _NotHot("the tool's circuit is the service's")
    if not parsed.ok and parsed.scope == "resource" and (parsed.run_id or (step and step.run_id)):
        raise _NotHot("a skipped resource is the service's")

    correlation_id = parsed.correlation_id or str(uuid.uuid4())
    event = envelope_event(parsed, tool)
    if step is not None and (step.tool_id != tool.pk or step.state in TERMINAL):
        raise _NotHot("a tool mismatch or a closed step is the service's")
    applied = event_plan(
        event=event,
        actor=AGENT,
        cause="envelope",
        now=now,
        team=team,
        tool=tool,
        operation_ref=operation_ref,
        step=step,
        new_step_id=found.new_step_id,
        correlation_id=correlation_id,
        run_id=parsed.run_id or "",
    )
    if applied is None or applied.step is None:
        raise _NotHot("no step to create")
    step, outcome = applied.step, applied.outcome
    envelope = envelope_build(
        parsed,
        team=team,
        tool=tool,
        step=step,
        correlation_id=correlation_id,
        flags=flags,
        documented=documented,
        step_closed=outcome.ignored,
        now=now,
    )
    envelope.id = found.envelope_id
    if not outcome.ignored:
        step.last_envelope = envelope
    shape = _write(applied, [envelope], cause="envelope", now=now)
    return IngestAnswer(
        envelope=envelope,
        step=step,
        directive_reason=outcome.directive_reason,
        directive_not_before=outcome.directive_not_before,
        dropped_detail_keys=parsed.dropped_detail_keys,
        flags=tuple(sorted(flags)),
        step_shape=shape,
    )


def _write(applied: Applied, rows: list[Any], *, cause: str, now: datetime) -> dict[str, Any] | None:
    """apply_event's writes in one statement: the step with step_save's changes (INSERT when it
    is new, else UPDATE of the locked row), its audit links, the caller's rows, and when the
    state changed the domain event; then the event's consumers (events.event_emit's hand-over).
    Returns the step's shape the event carries (None: no event), which the answer reuses: the
    step does not change after this."""
    step, outcome = applied.step, applied.outcome
    assert step is not None
    step.updated_at = now  # transitions.step_save
    step.version += 1
    statements = [modelsql.insert(step) if applied.created else modelsql.update(step)]
    statements += [modelsql.insert(row) for row in [*applied.audit_events, *rows]]
    emitted: dict[str, Any] | None = None
    handed: dict[str, Any] = {}  # the event as events.event_emit hands it to its consumers
    folds: list[Fold] = []
    called: list[Consumer] = []
    if outcome.changed:
        emitted = {"step": step_representation(step), "cause": cause}
        event = DomainEvent(
            team_id=step.team_id,
            type="step.state_changed",
            step_id=step.pk,
            tool=step.tool.name,
            data=emitted,
            created_at=timezone.now(),
        )
        statements.append(modelsql.insert(event))
        handed = {"team_id": step.team_id, "event_type": event.type, "data": emitted, "step_id": step.pk}
        # The consumers that can do their work in this statement (the webhook outbox) do; the
        # others are called once it is written.
        for consumer in consumers():
            folder = folder_of(consumer)
            fold = folder(**handed) if folder else None
            if fold is None:
                called.append(consumer)
            else:
                folds.append(fold)
    if folds:
        counts = modelsql.fetchone_bound(*modelsql.combined(statements, [(f.sql, f.params) for f in folds]))
    else:
        counts = ()
        modelsql.execute_bound(*modelsql.combined(statements))
    modelsql.mark_saved(step, *applied.audit_events, *rows)
    for fold, count in zip(folds, counts or (), strict=True):  # one count per fold
        fold.written(count)
    for consumer in called:
        consumer(**handed)
    return None if emitted is None else emitted["step"]


# --- the attempt gate -----------------------------------------------------------------------


def attempt_request(
    *,
    team: Team,
    operation_ref: str,
    tool_name: str,
    fingerprint: str,
    accepted: AcceptedInput | None,
    run_id: str = "",
    correlation_id: str = "",
    now: datetime | None = None,
) -> AttemptGrant | None:
    """The attempt gate on the hot path (as `services.attempt_request`, whose `input` the caller
    has already accepted with `proposal.input_accept`): the grant, or AttemptRefused raised
    once the refusal's audit link is committed; None when it is not the common case (a new
    tool, another tool's step, a refusal before any step exists, a race on a new step: nothing
    was written, the caller runs the service)."""
    if connection.vendor != "postgresql":
        return None
    now = now or timezone.now()
    try:
        with transaction.atomic():
            applied, attempt, shape = _attempt(
                team, operation_ref, tool_name, fingerprint, accepted, run_id, correlation_id, now
            )
    except (_NotHot, IntegrityError):
        return None
    step, outcome = applied.step, applied.outcome
    assert step is not None
    if outcome.refusal:
        raise AttemptRefused(
            outcome.refusal,
            REFUSAL_DETAIL[outcome.refusal],
            step=step,
            directive=step_representation(
                step,
                directive_reason=outcome.directive_reason,
                directive_not_before=outcome.directive_not_before,
                built=shape,
            )["directive"],
            retry_after=outcome.retry_after,
        )
    assert attempt is not None
    return AttemptGrant(attempt=attempt, step=step, step_shape=shape)


def _attempt(
    team: Team,
    operation_ref: str,
    tool_name: str,
    fingerprint: str,
    accepted: AcceptedInput | None,
    run_id: str,
    correlation_id: str,
    now: datetime,
) -> tuple[Applied, Attempt | None, dict[str, Any] | None]:
    found = _context(team, tool_name, operation_ref, code=None)
    tool, step = found.tool, found.step
    if step is not None and step.tool_id != tool.pk:
        raise _NotHot("another tool's step: the service's tool_mismatch")
    event = attempt_event(fingerprint, tool)
    applied = event_plan(
        event=event,
        actor=AGENT,
        cause="attempt",
        now=now,
        team=team,
        tool=tool,
        operation_ref=operation_ref,
        step=step,
        new_step_id=found.new_step_id,
        correlation_id=correlation_id,
        run_id=run_id,
    )
    if applied is None or applied.step is None:
        raise _NotHot("refused before any step exists")
    step, outcome = applied.step, applied.outcome
    if not (applied.created or applied.audit_events or outcome.granted):
        raise _NotHot("nothing of the step to save: apply_event's narrower cases")
    # services.attempt_request's attempt_create.
    stored_input = accepted.stored if accepted else None
    redacted = accepted.redacted if accepted else False
    rows: list[Any] = []
    attempt = None
    if outcome.granted:
        attempt = Attempt(
            step=step,
            number=step.attempts,
            fingerprint=fingerprint,
            run_id=run_id,
            correlation_id=correlation_id,
            granted_at=now,
            input=stored_input,
            input_redacted=redacted,
        )
        rows.append(attempt)
        proposal_remember(step, Proposal(attempt.number, fingerprint, stored_input, redacted, now))
    elif outcome.refusal == "approval_mismatch":
        rows.append(
            ProposedInput(
                step=step, fingerprint=fingerprint, input=stored_input, input_redacted=redacted, proposed_at=now
            )
        )
        proposal_remember(step, Proposal(None, fingerprint, stored_input, redacted, now))
    shape = _write(applied, rows, cause="attempt", now=now)
    return applied, attempt, shape
