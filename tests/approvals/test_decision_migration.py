"""approvals 0002: approvals made before it on a step still waiting for its second approval count
for the input under review (the step's approval fingerprint), so an upgrade mid-way through a
two-reviewer approval neither loses the first approval nor lets it count for another input."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.migrating import migrate, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("approvals", "0001_initial")]
AFTER = [("approvals", "0002_decision_input_fingerprint_edited")]


def test_a_pending_approval_counts_for_the_fingerprint_under_review() -> None:
    old = migrate(BEFORE)
    try:
        team = old.get_model("envelopes", "Team").objects.create(slug="acme", name="acme")
        tool = old.get_model("envelopes", "Tool").objects.create(team=team, name="issue_refund")
        user = old.get_model("auth", "User").objects.create(username="rita")
        step_model, decision_model = old.get_model("envelopes", "Step"), old.get_model("approvals", "Decision")
        entered = timezone.now()
        common = {"team": team, "tool": tool, "reason": "approval_pending", "state_entered_at": entered}
        waiting = step_model.objects.create(
            operation_ref="waiting", state="awaiting_approval", approval_fingerprint="a" * 64, **common
        )
        released = step_model.objects.create(
            operation_ref="released", state="retry_ready", approval_fingerprint="b" * 64, **common
        )
        for step in (waiting, released):
            decision_model.objects.create(step=step, reviewer=user, action="approve", decided_at=entered)
        decision_model.objects.create(step=waiting, reviewer=user, action="reject", decided_at=entered)
    finally:
        new = migrate(AFTER)
    try:
        decisions = new.get_model("approvals", "Decision").objects
        assert decisions.get(step__operation_ref="waiting", action="approve").input_fingerprint == "a" * 64
        assert decisions.get(step__operation_ref="waiting", action="reject").input_fingerprint == ""
        assert decisions.get(step__operation_ref="released").input_fingerprint == ""
    finally:
        migrate_to_latest()
