"""Thin, idempotent Celery tasks: they take ids, re-check state under lock, call one service."""

from __future__ import annotations

from celery import shared_task

from accounts.models import Team

from . import services
from .audit import audit_seal
from .events import domain_event_purge
from .idempotency import idempotency_purge
from .retention import quarantine_purge


@shared_task
def sweep_due_steps() -> int:
    """Beat's sweep: fire every due timer (retry windows, verification deadlines, expiries,
    approvals' lapses: one per step per call, the next one later), widen escalating requests for
    approval, and close elapsed circuits.
    Each step is claimed with SKIP LOCKED, so sweepers never fire one timer twice."""
    fired = 0
    while True:
        due = services.due_step_ids(limit=500)
        if not due:
            break
        moved = sum(services.step_fire_timer(step_id=step_id) for step_id in due)
        fired += moved
        if len(due) < 500 or moved == 0:
            break
    # Requests for approval that waited their tool's escalate_after_s: their deciders widen.
    while True:
        due = services.due_escalation_ids(limit=500)
        widened = sum(services.step_escalate_approvers(step_id=step_id) for step_id in due)
        fired += widened
        if len(due) < 500 or widened == 0:
            break
    services.due_tools_resume()
    return fired


@shared_task
def purge_idempotency_keys() -> int:
    """Beat, hourly: forget stored answers past HOLDPOINT_IDEMPOTENCY_TTL_HOURS."""
    return idempotency_purge()


@shared_task
def purge_quarantine() -> int:
    """Beat, hourly: forget quarantined payloads past HOLDPOINT_QUARANTINE_RETENTION_DAYS."""
    return quarantine_purge()


@shared_task
def purge_domain_events() -> int:
    """Beat, hourly: forget domain events past HOLDPOINT_DOMAIN_EVENT_RETENTION_DAYS that no
    consumer still needs (envelopes.events, retention)."""
    return domain_event_purge()


@shared_task
def seal_audit_chains() -> int:
    return sum(1 for team in Team.objects.all() if audit_seal(team=team) is not None)
