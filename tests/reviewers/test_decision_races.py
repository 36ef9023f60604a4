"""The same step decided at once through the reviewer API (twice) and the dashboard's form, in
real threads on PostgreSQL: exactly one transition and one decision link; the others are told
412 step_changed or "already decided"."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages

from envelopes.audit import audit_verify
from envelopes.models import AuditEvent, Decision, Step
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient, logged_in
from tests.envelopes.test_concurrency import run_together
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 4


def test_api_api_and_form_at_once_make_one_decision(
    agent: AgentClient, reviewer: Any, second_reviewer: Any, make_reviewer: Any
) -> None:
    third = make_reviewer("tess", "reviewer")
    rita, sam = token_for(reviewer), token_for(second_reviewer)
    winners: list[str] = []
    for n in range(ROUNDS):
        ref = f"race/{n}"
        step = post_envelope(agent, approval_envelope(operation_ref=ref))
        etag = rita.etag(ref)
        form_data = {
            "action": "reject",
            "reason": "form says no",
            "expected_state": step.state,
            "expected_since": step.state_entered_at.isoformat(),
        }

        def by_api(client: ReviewerClient, body: dict[str, Any], ref: str = ref, etag: str = etag) -> Any:
            response = ReviewerClient(client.raw_token).decide(ref, body, etag=etag)
            return response.status_code, response.json()["code"] if response.status_code >= 400 else "ok"

        def by_form(step: Step = step, data: dict[str, str] = form_data) -> Any:
            response = logged_in(third).post(f"/steps/{step.pk}/decide", data)
            return response.status_code, [str(m) for m in get_messages(response.wsgi_request)]

        api_rita, api_sam, form = run_together(
            [
                lambda: by_api(rita, {"action": "approve"}),
                lambda: by_api(sam, {"action": "reject", "reason": "api says no"}),
                by_form,
            ]
        )

        outcomes = {"rita": api_rita, "sam": api_sam, "form": form}
        assert not any(isinstance(o, Exception) for o in outcomes.values()), outcomes
        won = [who for who, o in outcomes.items() if o in ((201, "ok"),) or (who == "form" and "Rejected" in o[1][0])]
        assert len(won) == 1, outcomes
        winners += won
        for who, outcome in outcomes.items():
            if who in won:
                continue
            if who == "form":
                assert outcome[0] == 303 and outcome[1][0].startswith("Already decided"), outcome
            else:
                assert outcome == (412, "step_changed"), outcome
        step.refresh_from_db()
        assert Decision.objects.filter(step=step).count() == 1
        assert AuditEvent.objects.filter(step=step, kind="decision").count() == 1
        transitions = AuditEvent.objects.filter(step=step, kind="transition", before="awaiting_approval")
        assert transitions.count() == 1
        assert step.state in ("retry_ready", "cancelled")
    assert audit_verify() == []
    assert len(winners) == ROUNDS
