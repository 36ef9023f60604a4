"""`on_approval_expiry: escalate` (contract §12): an expired request for approval moves to
`escalated` (`approval_expired`) through the timer sweep, its input still under review; nothing
is ever approved by time, and the default still cancels."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from envelopes import services
from envelopes.configuration import ConfigurationError, tool_configure
from envelopes.models import Step
from envelopes.proposal import input_fingerprint
from tests.approvals.conftest import approval_envelope, post_envelope

pytestmark = pytest.mark.django_db

ASKED = {"amount": 20000, "to": "acct_9"}


def _held(agent, ref: str) -> Step:  # type: ignore[no-untyped-def]
    answer = agent.attempt(ref, tool="wire", fingerprint=input_fingerprint(ASKED), input=ASKED)
    assert answer.status_code == 201, answer.content
    return post_envelope(agent, approval_envelope(operation_ref=ref, tool="wire"))


@pytest.mark.parametrize(("mode", "state"), [("escalate", "escalated"), ("cancel", "cancelled")])
def test_an_expired_request_is_escalated_or_cancelled_never_approved(agent, team, mode: str, state: str) -> None:
    tool_configure(team=team, name="wire", settings={"on_approval_expiry": mode, "approval_ttl_s": 60}, actor="t")
    step = _held(agent, f"run_1/{mode}")
    later = timezone.now() + timedelta(seconds=61)
    assert step.pk in services.due_step_ids(now=later)
    assert services.step_fire_timer(step_id=step.pk, now=later) is True
    step.refresh_from_db()
    assert (step.state, step.reason) == (state, "approval_expired")
    assert step.approved_at is None
    if mode == "escalate":
        assert step.review_started_at is not None  # still under review: not approved by time
        again = agent.attempt(step.operation_ref, tool="wire", fingerprint=input_fingerprint(ASKED), input=ASKED)
        assert again.status_code == 409 and again.json()["code"] == "escalated"
        step.refresh_from_db()
        assert step.attempts == 1


def test_on_approval_expiry_is_cancel_or_escalate(team) -> None:
    with pytest.raises(ConfigurationError, match="on_approval_expiry must be cancel or escalate"):
        tool_configure(team=team, name="wire", settings={"on_approval_expiry": "approve"}, actor="t")


def test_the_machine_escalates_an_expired_request_keeping_it_under_review() -> None:
    from envelopes.lifecycle import AttemptRequested, Snapshot, TimerFired, advance
    from envelopes.states import State

    now = timezone.now()
    fingerprint = input_fingerprint(ASKED)
    before = Snapshot(
        state=State.AWAITING_APPROVAL,
        reason="approval_pending",
        attempts=1,
        last_fingerprint=fingerprint,
        approval_fingerprint=fingerprint,
        review_started_at=now - timedelta(hours=2),
        expires_at=now,
    )
    assert before.due_timer(now) == "approval_expired"
    outcome = advance(before, TimerFired("approval_expired", on_expiry="escalate"), now)
    after = outcome.after
    assert (after.state, after.reason, outcome.effects) == (State.ESCALATED, "approval_expired", ("approval_expired",))
    assert after.under_review and after.approved_at is None
    assert not advance(after, AttemptRequested(fingerprint), now).granted
    cancelled = advance(before, TimerFired("approval_expired"), now).after
    assert (cancelled.state, cancelled.reason) == (State.CANCELLED, "approval_expired")
