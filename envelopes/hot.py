"""The hot path of the ingest: the common envelope in four SQL statements instead of a dozen.

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
3. the consumers of the event stream, as `events.event_emit` would call them (the webhook
   outbox, notifications), in the same transaction.

Anything else (another dialect, a new tool, a rejected or strict-undocumented envelope, a
closed step, a halt, a skipped resource, a race on a new step) answers None before anything
is committed, and the caller runs `services.envelope_ingest`, which handles every case. The
tests in tests/perf check that both paths write the same rows and answer the same.
"""

from __future__ import annotations

import functools
import uuid
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import prefetch_related_objects
from django.utils import timezone

from . import hot_sql, lifecycle, schema
from .events import DomainEvent, consumers
from .lifecycle import TERMINAL
from .models import Envelope, ErrorCode, Step, Team, Tool
from .presenters import decisions_prefetch, step_representation
from .services import IngestAnswer
from .transitions import AGENT, event_plan


class _NotHot(Exception):
    """Not the common case: roll back and let services.envelope_ingest do it."""


def envelope_ingest(*, team: Team, payload: Any, dialect: str, now: datetime | None = None) -> IngestAnswer | None:
    """Ingest one envelope on the hot path; None when it is not the common case (nothing was
    written then: the caller runs `services.envelope_ingest`)."""
    if dialect != "canonical" or connection.vendor != "postgresql":
        return None
    tool_name, operation_ref = schema.identify(payload, dialect)
    code = payload.get("code") if isinstance(payload, dict) else None
    if not tool_name or not operation_ref or not (code is None or isinstance(code, str)):
        return None
    try:
        with transaction.atomic():
            return _ingest(team, payload, tool_name, operation_ref, code or "", now or timezone.now())
    except (_NotHot, IntegrityError):  # IntegrityError: another request created the step first
        return None


@functools.cache
def _no_decisions() -> Any:
    """An empty queryset of decisions, built once (iterating it reads nothing)."""
    return Step._meta.get_field("decisions").related_model._default_manager.none()  # type: ignore[union-attr]


@functools.cache
def _context_sql() -> str:
    """The tool, the documented check, the locked step, its decisions, the new rows' ids."""
    decisions = Step._meta.get_field("decisions").related_model  # the reviewers' app, by relation
    step_fk = Step._meta.get_field("decisions").field.column  # type: ignore[union-attr]
    q = hot_sql.quote
    return (
        f"SELECT {hot_sql.select_list(Tool, 't')}, "  # noqa: S608 (names only)
        f"EXISTS (SELECT 1 FROM {hot_sql.table(ErrorCode)} c WHERE c.{q('team_id')} = %(team)s "
        f"AND c.{q('code')} = %(code)s AND (c.{q('tool_id')} = t.{q('id')} OR c.{q('tool_id')} IS NULL)), "
        f"CASE WHEN s.{q('id')} IS NULL THEN nextval(pg_get_serial_sequence(%(step_table)s, 'id')) END, "
        f"nextval(pg_get_serial_sequence(%(envelope_table)s, 'id')), "
        f"s.{q('id')} IS NOT NULL AND EXISTS (SELECT 1 FROM {hot_sql.table(decisions)} d "  # type: ignore[arg-type]
        f"WHERE d.{q(step_fk)} = s.{q('id')}), "
        f"{hot_sql.select_list(Step, 's')} "
        f"FROM {hot_sql.table(Tool)} t LEFT JOIN LATERAL ("
        f"SELECT * FROM {hot_sql.table(Step)} WHERE {q('team_id')} = %(team)s AND {q('operation_ref')} = %(ref)s "
        f"FOR UPDATE) s ON true "
        f"WHERE t.{q('team_id')} = %(team)s AND t.{q('name')} = %(tool)s"
    )


def _ingest(team: Team, payload: Any, tool_name: str, operation_ref: str, code: str, now: datetime) -> IngestAnswer:
    with connection.cursor() as cursor:
        cursor.execute(
            _context_sql(),
            {
                "team": team.pk,
                "tool": tool_name,
                "ref": operation_ref,
                "code": code,
                "step_table": Step._meta.db_table,
                "envelope_table": Envelope._meta.db_table,
            },
        )
        row = cursor.fetchone()
    if row is None:
        raise _NotHot("a tool the team does not have yet")
    tool_columns = len(hot_sql.column_fields(Tool))
    tool: Tool = hot_sql.from_row(Tool, row)
    documented, new_step_id, envelope_id, has_decisions = row[tool_columns : tool_columns + 4]
    step_row = row[tool_columns + 4 :]
    step: Step | None = None if step_row[0] is None else hot_sql.from_row(Step, step_row)

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
    documented = True if parsed.ok else bool(documented) and (parsed.code or "") == code
    if not documented:
        if tool.strict_codes:
            raise _NotHot("an undocumented code for a strict tool: the quarantine is the service's")
        flags.add("undocumented_code")
    if not parsed.ok and parsed.scope == "service":
        raise _NotHot("the tool's circuit is the service's")
    if not parsed.ok and parsed.scope == "resource" and (parsed.run_id or (step and step.run_id)):
        raise _NotHot("a skipped resource is the service's")

    correlation_id = parsed.correlation_id or str(uuid.uuid4())
    event = lifecycle.EnvelopeArrived(
        ok=parsed.ok,
        commit_state=parsed.commit_state,
        next_action=parsed.next_action,
        max_attempts_remaining=parsed.max_attempts_remaining,
        not_before=parsed.not_before,
        attempt=parsed.attempt,
        occurred_at=parsed.occurred_at,
        consistency_window_s=tool.consistency_window_s,
        verification_deadline_s=tool.verification_deadline_s,
        approval_ttl_s=tool.approval_ttl_s,
    )
    if step is not None:
        if step.tool_id != tool.pk or step.state in TERMINAL:
            raise _NotHot("a tool mismatch or a closed step is the service's")
        step.team = team
        if has_decisions:
            prefetch_related_objects([step], decisions_prefetch())
        else:  # no decisions to read: the answer need not ask
            step._prefetched_objects_cache = {"decisions": _no_decisions()}  # type: ignore[attr-defined]
    applied = event_plan(
        event=event,
        actor=AGENT,
        cause="envelope",
        now=now,
        team=team,
        tool=tool,
        operation_ref=operation_ref,
        step=step,
        new_step_id=new_step_id,
        correlation_id=correlation_id,
        run_id=parsed.run_id or "",
    )
    if applied is None or applied.step is None:
        raise _NotHot("no step to create")
    step, outcome, created, links = applied.step, applied.outcome, applied.created, applied.audit_events
    envelope = Envelope(
        id=envelope_id,
        team=team,
        tool=tool,
        step=step,
        dialect=parsed.dialect,
        ok=parsed.ok,
        code=parsed.code or "",
        category=parsed.category or "",
        commit_state=parsed.commit_state or "",
        retry_directive=parsed.retry_directive or "",
        not_before=parsed.not_before,
        max_attempts_remaining=parsed.max_attempts_remaining,
        next_action=parsed.next_action or "",
        scope=parsed.scope or "",
        resource_id=parsed.resource_id or "",
        safe_details=parsed.safe_details,
        dropped_detail_keys=list(parsed.dropped_detail_keys),
        agent_message=parsed.agent_message,
        user_message=parsed.user_message,
        correlation_id=correlation_id,
        run_id=parsed.run_id or "",
        attempt=parsed.attempt,
        occurred_at=parsed.occurred_at,
        received_at=now,
        verification=parsed.verification,
        result_sha256=parsed.result_sha256 or "",
        result_size=parsed.result_size,
        flags=sorted(flags),
        documented=documented,
        step_closed=outcome.ignored,
    )
    if not outcome.ignored:
        step.last_envelope = envelope
    step.updated_at = now  # transitions.step_save's changes
    step.version += 1

    statements = [hot_sql.insert(step) if created else hot_sql.update(step)]
    statements += [hot_sql.insert(link) for link in links]
    statements.append(hot_sql.insert(envelope))
    emitted: dict[str, Any] | None = None
    if outcome.changed:
        emitted = {"step": step_representation(step), "cause": "envelope"}
        statements.append(
            hot_sql.insert(
                DomainEvent(
                    team_id=team.pk,
                    type="step.state_changed",
                    step_id=step.pk,
                    tool=tool.name,
                    data=emitted,
                    created_at=timezone.now(),
                )
            )
        )
    sql, params = hot_sql.combined(statements)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    hot_sql.mark_saved(step, envelope, *links)
    if emitted is not None:
        for consumer in consumers():  # events.event_emit's hand-over, after its row
            consumer(team_id=team.pk, event_type="step.state_changed", data=emitted, step_id=step.pk)
    return IngestAnswer(
        envelope=envelope,
        step=step,
        directive_reason=outcome.directive_reason,
        directive_not_before=outcome.directive_not_before,
        dropped_detail_keys=parsed.dropped_detail_keys,
        flags=tuple(sorted(flags)),
    )
