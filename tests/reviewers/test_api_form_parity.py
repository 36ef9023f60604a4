"""One decision service for both doors: a step decided through the reviewer API and one decided
through the dashboard's form leave the same audit links, decision rows and domain events,
field by field, except ids, times, the step itself and the hashes that chain over them."""

from __future__ import annotations

from typing import Any

import pytest
from django.forms.models import model_to_dict

from envelopes.events import DomainEvent
from envelopes.models import AuditEvent, Decision, Step
from tests.approvals.conftest import approval_envelope, post_envelope
from tests.conftest import AgentClient, logged_in
from tests.reviewers.conftest import ReviewerClient

pytestmark = pytest.mark.django_db

# A receipt signs the step's own ref and time, so it differs by step; both doors make one
# (tests/evidence/test_receipts.py).
VARYING = {"id", "step", "chain", "created_at", "decided_at", "prev_hash", "hash", "held_seconds", "receipt"}


def links_after(step: Step, seq: int) -> list[dict[str, Any]]:
    rows = []
    for link in AuditEvent.objects.filter(step=step, seq__gt=seq).order_by("seq"):
        row = {k: v for k, v in model_to_dict(link).items() if k not in VARYING}
        row["data"] = {k: v for k, v in link.data.items() if k not in {"decision_id", "receipt"}}
        rows.append(row)
    return rows


def decisions(step: Step) -> list[dict[str, Any]]:
    return [{k: v for k, v in model_to_dict(d).items() if k not in VARYING} for d in Decision.objects.filter(step=step)]


def events_after(step: Step, last_id: int) -> list[tuple[str, Any]]:
    events = DomainEvent.objects.filter(step=step, id__gt=last_id).order_by("id")
    return [(event.type, _without_step_identity(event.data)) for event in events]


def _without_step_identity(data: Any) -> Any:
    if isinstance(data, dict):
        return {
            k: _without_step_identity(v)
            for k, v in data.items()
            if k
            not in {
                "operation_ref",
                "correlation_id",
                "url",
                "decided_at",
                "created_at",
                "updated_at",
                "occurred_at",
                "envelope_id",
                "receipt",
            }
        }
    if isinstance(data, list):
        return [_without_step_identity(v) for v in data]
    return data


@pytest.mark.parametrize(("action", "reason"), [("approve", "within budget"), ("reject", "duplicate charge")])
def test_an_api_decision_and_a_form_decision_leave_the_same_trail(
    agent: AgentClient, reviewer: Any, rita_api: ReviewerClient, action: str, reason: str
) -> None:
    by_api = post_envelope(agent, approval_envelope(operation_ref="run_1/charge"))
    by_form = post_envelope(agent, approval_envelope(operation_ref="run_2/charge"))
    seqs = {step.pk: step.audit_seq for step in (by_api, by_form)}
    last_event = DomainEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0

    response = rita_api.decide("run_1/charge", {"action": action, "reason": reason}, etag=rita_api.etag("run_1/charge"))
    assert response.status_code == 201, response.content
    form = logged_in(reviewer).post(
        f"/steps/{by_form.pk}/decide", {"action": action, "reason": reason, "expected_state": by_form.state}
    )
    assert form.status_code == 303

    api_links, form_links = links_after(by_api, seqs[by_api.pk]), links_after(by_form, seqs[by_form.pk])
    assert [link["kind"] for link in api_links] == ["decision", "transition"]
    assert api_links == form_links
    assert decisions(by_api) == decisions(by_form) != []
    api_events, form_events = events_after(by_api, last_event), events_after(by_form, last_event)
    assert {kind for kind, _ in api_events} == {"step.state_changed", "step.decided"}
    assert api_events == form_events
    by_api.refresh_from_db()
    by_form.refresh_from_db()
    assert (by_api.state, by_api.reason, by_api.version) == (by_form.state, by_form.reason, by_form.version)
