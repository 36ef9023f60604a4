"""envelopes 0010: every open step's binding gets the standing it really had before the change,
read from the step's audit chain: approved only when the step last left awaiting_approval by an
approval and ran nothing since; under review when it left it any other way (the four-eyes bypass
of issue 23: a malformed envelope, then maybe a permitted retry)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from envelopes import errors, services
from envelopes.models import Step
from tests.migrating import migrate, migrate_to_latest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("envelopes", "0010_step_queue_page_indexes")]
AFTER = [("envelopes", "0011_step_approval_standing")]
FP = "a" * 64
TTL = 3600


class History:
    """Steps as the old code left them, each with the audit links of the transitions it took."""

    def __init__(self, apps: Any) -> None:
        self.apps = apps
        team = apps.get_model("envelopes", "Team").objects.create(slug="acme", name="acme")
        self.tool = apps.get_model("envelopes", "Tool").objects.create(
            team=team, name="issue_refund", approval_ttl_s=TTL
        )
        self.team = team

    def step(self, ref: str, state: str, reason: str, fingerprint: str, *moves: tuple[str, str, str, Any]) -> None:
        entered = moves[-1][3] if moves else timezone.now()
        step = self.apps.get_model("envelopes", "Step").objects.create(
            team=self.team,
            tool=self.tool,
            operation_ref=ref,
            state=state,
            reason=reason,
            approval_fingerprint=fingerprint,
            state_entered_at=entered,
            due_at=None,
            audit_seq=len(moves),  # the chain below, so that the new code's links follow it
            audit_head=f"{len(moves):064x}" if moves else "",
        )
        for seq, (before, after, why, at) in enumerate(moves, start=1):
            self.apps.get_model("envelopes", "AuditEvent").objects.create(
                team=self.team,
                chain=f"step:{step.pk}",
                seq=seq,
                step=step,
                tool=self.tool,
                kind="transition",
                actor="test",
                before=before,
                after=after,
                reason=why,
                created_at=at,
                prev_hash="0" * 64,
                hash=f"{seq:064x}",
            )


def test_each_open_step_gets_the_standing_its_history_gives_it() -> None:
    now = timezone.now()
    asked, approved_at, escalated_at = (
        now - timedelta(minutes=30),
        now - timedelta(minutes=20),
        now - timedelta(minutes=10),
    )
    ask = ("in_progress", "awaiting_approval", "approval_pending", asked)
    granted = ("", "in_progress", "attempt_granted", asked - timedelta(minutes=1))
    old = migrate(BEFORE)
    try:
        history = History(old)
        history.step("waiting", "awaiting_approval", "approval_pending", FP, granted, ask)
        history.step(
            "approved", "needs_input", "input_fix_required", FP,
            granted, ask,
            ("awaiting_approval", "retry_ready", "approved", approved_at),
            ("retry_ready", "needs_input", "input_fix_required", escalated_at),
        )  # fmt: skip
        history.step(
            "malformed", "escalated", "malformed_envelope", FP,
            granted, ask, ("awaiting_approval", "escalated", "malformed_envelope", escalated_at),
        )  # fmt: skip
        history.step(
            "bypassed", "retry_ready", "retry_permitted", FP,
            granted, ask,
            ("awaiting_approval", "escalated", "malformed_envelope", escalated_at),
            ("escalated", "retry_ready", "retry_permitted", now - timedelta(minutes=5)),
        )  # fmt: skip
        history.step(
            "unbound", "escalated", "malformed_envelope", "",
            ("", "awaiting_approval", "approval_pending", asked),
            ("awaiting_approval", "escalated", "malformed_envelope", escalated_at),
        )  # fmt: skip
        history.step(
            "used", "needs_input", "input_fix_required", "",
            ("", "awaiting_approval", "approval_pending", asked),
            ("awaiting_approval", "retry_ready", "approved", approved_at),
            ("retry_ready", "in_progress", "attempt_granted", escalated_at),
            ("in_progress", "needs_input", "input_fix_required", now - timedelta(minutes=5)),
        )  # fmt: skip
        history.step(
            "stale", "retry_ready", "approved", FP,
            granted,
            ("in_progress", "awaiting_approval", "approval_pending", now - timedelta(days=3)),
            ("awaiting_approval", "retry_ready", "approved", now - timedelta(days=2)),
        )  # fmt: skip
        history.step("unexplained", "retry_ready", "approved", FP)
        history.step("never_asked", "needs_input", "input_fix_required", "", granted)
        history.step("closed", "succeeded", "committed", "", granted, ask)
    finally:
        migrate(AFTER)
        migrate_to_latest()  # the later migrations carry the standing forward; the code below needs them

    steps = {step.operation_ref: step for step in Step.objects.all()}

    def standing(ref: str) -> tuple[Any, Any, Any]:
        step = steps[ref]
        return step.review_started_at, step.approved_at, step.approval_lapses_at

    assert standing("waiting") == (asked, None, None)  # the window its approvals counted in
    assert standing("approved") == (None, approved_at, approved_at + timedelta(seconds=TTL))
    assert steps["approved"].due_at == approved_at + timedelta(seconds=TTL)
    assert standing("malformed") == (asked, None, None)
    assert standing("bypassed") == (asked, None, None)
    assert standing("unbound") == (asked, None, None)
    assert standing("used") == (None, None, None)
    assert standing("never_asked") == (None, None, None)
    assert standing("closed") == (None, None, None)
    unexplained = steps["unexplained"]
    assert unexplained.review_started_at is None and unexplained.approved_at is not None
    assert unexplained.approval_lapses_at == unexplained.approved_at + timedelta(seconds=TTL)
    assert unexplained.approved_at >= now

    # The gate now refuses what was only under review, and the sweep lapses what is too old.
    for ref in ("bypassed", "malformed"):
        step = Step.objects.select_related("tool").get(operation_ref=ref)
        assert step.snapshot().under_review
    team = steps["approved"].team
    assert services.attempt_request(team=team, operation_ref="unexplained", tool_name="issue_refund", fingerprint=FP)
    assert services.step_fire_timer(step_id=steps["stale"].pk)
    stale = Step.objects.get(operation_ref="stale")
    assert (stale.state, stale.reason) == ("cancelled", "approval_expired")
    with pytest.raises(errors.AttemptRefused) as refused:
        services.attempt_request(team=team, operation_ref="bypassed", tool_name="issue_refund", fingerprint=FP)
    assert refused.value.code == "approval_pending"
    assert Step.objects.get(operation_ref="bypassed").state == "awaiting_approval"
