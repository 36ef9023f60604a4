"""Delegation through the reviewer API with real tokens (contract §12): a reviewer sets their time
away and delegate at /teams/{team}/away; the delegate then decides "for" them on steps held for
their group (recorded in the decision, its audit link and `step.decided`), `?for=me` lists those
steps, and the delegate never counts twice towards one quorum."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from envelopes.configuration import tool_configure
from envelopes.events import DomainEvent
from envelopes.models import AuditEvent, Decision, Step
from envelopes.rfc3339 import rfc3339
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.delegation import finance_step, people
from tests.reviewers.conftest import ReviewerClient, token_for

pytestmark = pytest.mark.django_db
__all__ = ["finance_step", "people"]


def _later(days: int = 3) -> str:
    return rfc3339(timezone.now() + timedelta(days=days))  # type: ignore[return-value]


def away(client: ReviewerClient, body: Any):  # type: ignore[no-untyped-def]
    return client.http.put(f"/api/v1/teams/{client.team}/away", body, format="json")


def _approve(client: ReviewerClient, step: Step):  # type: ignore[no-untyped-def]
    return client.decide(step.operation_ref, {"action": "approve"}, etag=client.etag(step.operation_ref))


def test_away_is_set_read_and_cleared_by_the_reviewer(people: dict[str, Any]) -> None:
    alice = token_for(people["alice"])
    until = _later()
    answer = away(alice, {"until": until, "delegate": "bob"})
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"team": "acme", "user": "alice", "away": True, "away_until": until, "delegate": "bob"}
    assert alice.http.get("/api/v1/teams/acme/away").json()["delegate"] == "bob"
    back = alice.http.delete("/api/v1/teams/acme/away")
    assert back.status_code == 200
    assert back.json() == {"team": "acme", "user": "alice", "away": False, "away_until": None, "delegate": None}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"until": rfc3339(timezone.now() - timedelta(hours=1)), "delegate": "bob"}, "until"),
        ({"until": "next tuesday", "delegate": "bob"}, "until"),
        ({"until": "2030-01-01T10:00:00", "delegate": "bob"}, "until"),  # no offset
        ({"until": _later(), "delegate": "alice"}, "delegate"),  # herself
        ({"until": _later(), "delegate": "gus"}, "delegate"),  # another team's reviewer
        ({"until": _later(), "delegate": "nobody"}, "delegate"),
        ({"until": _later()}, "delegate"),
        ({"until": _later(), "delegate": "bob", "extra": 1}, "extra"),
    ],
)
def test_bad_input_is_problem_json_naming_the_field(
    people: dict[str, Any], make_reviewer: Any, other_team: Any, body: dict[str, Any], field: str
) -> None:
    make_reviewer("gus", "reviewer", in_team=other_team)
    answer = away(token_for(people["alice"]), body)
    assert answer.status_code == 422, answer.content
    assert answer["Content-Type"].startswith("application/problem+json")
    assert field in [error["field"] for error in answer.json()["errors"]]
    assert token_for(people["alice"]).http.get("/api/v1/teams/acme/away").json()["away"] is False


def test_another_teams_away_is_404(people: dict[str, Any], other_team: Any) -> None:
    answer = away(token_for(people["alice"], team="globex"), {"until": _later(), "delegate": "bob"})
    assert answer.status_code == 404
    assert answer["Content-Type"].startswith("application/problem+json")


def test_the_delegate_decides_for_the_away_member_recorded_everywhere(
    people: dict[str, Any], finance_step: Step
) -> None:
    bob = token_for(people["bob"])
    assert _approve(bob, finance_step).status_code == 403  # not in finance, nobody away
    assert bob.queue(**{"for": "me"}).json()["results"] == []
    assert away(token_for(people["alice"]), {"until": _later(), "delegate": "bob"}).status_code == 200
    assert [s["operation_ref"] for s in bob.queue(**{"for": "me"}).json()["results"]] == [finance_step.operation_ref]
    answer = _approve(bob, finance_step)
    assert answer.status_code == 201, answer.content
    assert answer.json()["decision"]["reviewer"] == "bob"
    assert answer.json()["decision"]["on_behalf_of"] == "alice"
    decision = Decision.objects.get(step=finance_step)
    assert (decision.reviewer, decision.on_behalf_of) == (people["bob"], people["alice"])
    link = AuditEvent.objects.get(step=finance_step, kind="decision")
    assert (link.actor, link.data["on_behalf_of"]) == ("bob", "alice")
    event = DomainEvent.objects.filter(step_id=finance_step.pk, type="step.decided").latest("id")
    assert event.data["decision"]["on_behalf_of"] == "alice"
    assert event.data["decision"]["reviewer"] == "bob"
    finance_step.refresh_from_db()
    assert finance_step.state == "awaiting_approval"  # 1 of 2
    fay = token_for(people["fay"])
    assert _approve(fay, finance_step).status_code == 201
    finance_step.refresh_from_db()
    assert finance_step.state == "retry_ready"  # released: the agent may write


def test_the_away_member_herself_does_not_count_again(people: dict[str, Any], finance_step: Step) -> None:
    alice = token_for(people["alice"])
    away(alice, {"until": _later(), "delegate": "bob"})
    assert _approve(token_for(people["bob"]), finance_step).status_code == 201
    again = _approve(alice, finance_step)  # alice, still away or back, approves the same input
    assert again.status_code == 409, again.content
    assert again.json()["code"] == "decision_not_allowed"
    assert "already approved" in again.json()["detail"]
    finance_step.refresh_from_db()
    assert finance_step.state == "awaiting_approval"


def test_a_delegate_for_two_counts_once(people: dict[str, Any], finance_step: Step) -> None:
    away(token_for(people["alice"]), {"until": _later(), "delegate": "bob"})
    away(token_for(people["fay"]), {"until": _later(), "delegate": "bob"})
    bob = token_for(people["bob"])
    assert _approve(bob, finance_step).status_code == 201
    again = _approve(bob, finance_step)  # "for fay" now would be bob's second approval
    assert again.status_code == 409, again.content
    finance_step.refresh_from_db()
    assert finance_step.state == "awaiting_approval"
    assert finance_step.decisions.count() == 1


def test_once_back_the_delegate_decides_nothing_for_them(people: dict[str, Any], finance_step: Step) -> None:
    alice = token_for(people["alice"])
    away(alice, {"until": _later(), "delegate": "bob"})
    alice.http.delete("/api/v1/teams/acme/away")
    answer = _approve(token_for(people["bob"]), finance_step)
    assert answer.status_code == 403
    assert answer.json()["group"] == "finance"


def test_a_reviewer_who_may_decide_decides_as_themselves(people: dict[str, Any], agent: Any, team: Any) -> None:
    tool_configure(team=team, name="refund", settings={}, actor="t")
    step = post_envelope(agent, approval_envelope(operation_ref="run_8/refund", tool="refund"))
    away(token_for(people["alice"]), {"until": _later(), "delegate": "bob"})
    answer = _approve(token_for(people["bob"]), step)
    assert answer.status_code == 201
    assert answer.json()["decision"]["on_behalf_of"] is None
