"""approvals.services: decisions re-checked under the step lock."""

from __future__ import annotations

import pytest

from approvals.services import DecisionRefused, step_decide
from envelopes.models import Step
from tests.conftest import error_envelope, fingerprint

pytestmark = pytest.mark.django_db


def test_a_page_from_an_earlier_approval_request_cannot_decide_a_new_one(agent, team, make_reviewer) -> None:
    agent.attempt("inv/1", tool="create_invoice", fingerprint=fingerprint("a"))
    agent.envelope(
        error_envelope(
            tool="create_invoice",
            operation_ref="inv/1",
            code="MISSING_APPROVAL",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        )
    )
    step = Step.objects.get()
    first_request = step.state_entered_at
    step_decide(
        team=team,
        step_id=step.pk,
        actor=make_reviewer(),
        action="approve",
        reason="ok",
        expected_state="awaiting_approval",
        expected_since=first_request,
    )
    agent.attempt("inv/1", tool="create_invoice", fingerprint=fingerprint("b"))  # approval_mismatch: asks again
    step.refresh_from_db()
    assert (step.state, step.reason) == ("awaiting_approval", "approval_mismatch")
    assert step.state_entered_at > first_request
    with pytest.raises(DecisionRefused) as refused:
        step_decide(
            team=team,
            step_id=step.pk,
            actor=make_reviewer("rob"),
            action="approve",
            reason="stale",
            expected_state="awaiting_approval",
            expected_since=first_request,
        )
    assert refused.value.already_decided
    step.refresh_from_db()
    assert step.reason == "approval_mismatch"
