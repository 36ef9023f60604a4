"""Step rows for a benchmark's data set, in bulk: the one place outside `transitions.plan_write`
that writes Step rows (tests/envelopes/test_step_writes.py names it). Only for building data a
measurement reads (steps whose links or attempts the script writes itself), never a door."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any


def steps_bulk(
    *, team: Any, tool: Any, refs: Iterable[str], state: str, reason: str, at: datetime, audit_seq: int = 0
) -> list[Any]:
    """The steps, each with `audit_seq` links the caller writes itself."""
    from envelopes.models import Step  # after django.setup(), which the scripts call first

    rows = (
        Step(team=team, tool=tool, operation_ref=ref, state=state, reason=reason, created_at=at, updated_at=at,
             state_entered_at=at, audit_seq=audit_seq)
        for ref in refs
    )  # fmt: skip
    return Step.objects.bulk_create(rows, batch_size=5000)
