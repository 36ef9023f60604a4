"""Two reviewers press "Edit and approve" at the same moment, each with their own edit: real
threads, real transactions on PostgreSQL, through the dashboard's form (issue 11 point 6)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from envelopes.models import AuditEvent, Decision
from envelopes.proposal import input_fingerprint
from tests.approvals.conftest import HTMX, held_with_input
from tests.conftest import AgentClient, logged_in
from tests.envelopes.test_concurrency import run_together

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_reviewers_editing_at_once_one_wins_the_other_is_told(agent: AgentClient, make_reviewer: Any) -> None:
    step = held_with_input(agent, "run_9/race", {"amount": 1250, "customer": "cus_9"})
    clients = {name: logged_in(make_reviewer(name, "reviewer")) for name in ("rita", "sam")}
    edits = {"rita": {"amount": 1000, "customer": "cus_9"}, "sam": {"amount": 900, "customer": "cus_9"}}

    def press(name: str) -> str:
        data = {
            "action": "approve",
            "edit": "1",
            "input": json.dumps(edits[name]),
            "reason": f"{name}'s edit",
            "expected_state": step.state,
            "expected_since": step.state_entered_at.isoformat(),
        }
        return clients[name].post(f"/steps/{step.pk}/decide", data, **HTMX).content.decode()

    answers = dict(zip(edits, run_together([lambda: press("rita"), lambda: press("sam")]), strict=True))

    (decision,) = Decision.objects.all()
    winner = decision.reviewer.username
    loser = "sam" if winner == "rita" else "rita"
    assert "Approved with your edits." in answers[winner]
    assert "<strong>Already decided.</strong>" in answers[loser]
    step.refresh_from_db()
    assert (step.state, step.approval_fingerprint) == ("retry_ready", input_fingerprint(edits[winner]))
    assert AuditEvent.objects.filter(step=step, kind="transition", after="retry_ready").count() == 1
