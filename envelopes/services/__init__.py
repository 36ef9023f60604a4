"""Every write of the agent side: envelopes, the attempt gate, verification, timers, circuits.

Each function runs in one transaction and applies its event through `transitions.apply_event`
(the step's context, the plan, the one writer). Views, tasks, commands and the approvals app
call these; nothing else sets `step.state`. The rare cases (a new tool, a rejected envelope, a
halt, a skipped resource, a race creating a step) are branches around the same plan.

The package's public API is the names below (`services.envelope_ingest(...)`); each lives in
the module of its seam. The errors they raise are in `envelopes.errors`.
"""

from __future__ import annotations

from .attempts import REFUSAL_DETAIL, AttemptGrant, attempt_event, attempt_request
from .circuits import due_tools_resume, tool_resume
from .ingest import (
    QUARANTINE_BODY_LIMIT,
    IngestAnswer,
    envelope_build,
    envelope_event,
    envelope_ingest,
    envelope_quarantine,
)
from .policy_holds import hold_act
from .steps import (
    StepAnswer,
    due_escalation_ids,
    due_step_ids,
    step_decision_apply,
    step_escalate_approvers,
    step_fire_timer,
    step_lock_for_decision,
    verification_report,
)

__all__ = [
    "QUARANTINE_BODY_LIMIT",
    "REFUSAL_DETAIL",
    "AttemptGrant",
    "IngestAnswer",
    "StepAnswer",
    "attempt_event",
    "attempt_request",
    "due_escalation_ids",
    "due_step_ids",
    "due_tools_resume",
    "envelope_build",
    "envelope_event",
    "envelope_ingest",
    "envelope_quarantine",
    "hold_act",
    "step_decision_apply",
    "step_escalate_approvers",
    "step_fire_timer",
    "step_lock_for_decision",
    "tool_resume",
    "verification_report",
]
