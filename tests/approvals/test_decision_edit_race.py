"""Two reviewers deciding the same held step at once, in real threads and transactions on
PostgreSQL: one decision wins, the other reviewer is told it was already decided."""

from __future__ import annotations

import pytest

from approvals.services import DecisionRefused, step_decide
from envelopes.audit import audit_verify
from envelopes.models import AuditEvent, Decision, Step
from envelopes.proposal import input_fingerprint
from tests.conftest import error_envelope
from tests.envelopes.test_concurrency import run_together

pytestmark = pytest.mark.django_db(transaction=True)

ASKED = {"amount": 9000, "customer": "c_1"}


@pytest.mark.parametrize("second", ["edit", "approve", "reject"])
def test_two_reviewers_editing_at_once_make_one_decision(agent, team, make_reviewer, second: str) -> None:
    granted = agent.attempt("race/edit", tool="issue_refund", fingerprint=input_fingerprint(ASKED), input=ASKED)
    assert granted.status_code == 201
    agent.envelope(
        error_envelope(
            tool="issue_refund",
            operation_ref="race/edit",
            code="REFUND_ABOVE_LIMIT",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        )
    )
    step = Step.objects.get()
    seen = (step.state, step.state_entered_at)
    rita, sam = make_reviewer("rita"), make_reviewer("sam")
    acts = {
        "edit": {"action": "approve", "edited_input": {**ASKED, "amount": 400}},
        "approve": {"action": "approve"},
        "reject": {"action": "reject", "reason": "no"},
    }

    def decide(reviewer, act):  # type: ignore[no-untyped-def]
        def work() -> str:
            try:
                step_decide(
                    team=team,
                    step_id=step.pk,
                    actor=reviewer,
                    expected_state=seen[0],
                    expected_since=seen[1],
                    **act,
                )
            except DecisionRefused as refused:
                return "already decided" if refused.already_decided else f"refused: {refused}"
            return "decided"

        return work

    first = {"action": "approve", "edited_input": {**ASKED, "amount": 500}}
    results = run_together([decide(rita, first), decide(sam, acts[second])])
    assert sorted(results) == ["already decided", "decided"], results
    assert Decision.objects.count() == 1
    step.refresh_from_db()
    decision = Decision.objects.get()
    expected = decision.input_fingerprint if decision.action == "approve" else ""
    assert step.approval_fingerprint == expected
    transitions = AuditEvent.objects.filter(step=step, kind="transition", before="awaiting_approval")
    assert transitions.count() == 1
    assert audit_verify() == []
