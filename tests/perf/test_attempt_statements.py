"""Issue 14: the attempt gate's round trips are pinned (issue 24: on its one write path, the
service's plan written by `transitions.plan_write`).

Counted through the API door, key lookup included; inside a test's transaction the request's
BEGIN and COMMIT are a SAVEPOINT and its RELEASE, and count the same."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
import time_machine
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from accounts.models import Team
from approvals.services import step_decide
from envelopes import services
from envelopes.audit import audit_verify
from envelopes.configuration import tool_configure
from envelopes.errors import AttemptRefused, EnvelopeInvalid
from envelopes.events import DomainEvent
from envelopes.models import Attempt, AuditEvent, Step
from envelopes.presenters import step_representation
from envelopes.step_context import tool_get_or_register
from tests.conftest import AgentClient, error_envelope, fingerprint
from tests.perf.rows import door
from webhooks.models import OutboxMessage
from webhooks.services import endpoint_create

# The one-statement write is PostgreSQL's (transitions.plan_write); elsewhere it saves the same
# instances one by one. CI runs these on PostgreSQL.
pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the counts are PostgreSQL's")

# BEGIN, the context read, the one write, COMMIT, after the door (rows.door: the key and the
# throttle). The caps were 6 and 5, door included.
GRANT_MAX = 4
REFUSAL_MAX = 4
INPUT = {"to": "a@example.com", "amount": 12.5, "items": [{"sku": "x", "qty": 2}]}
INPUT_FP = hashlib.sha256(rfc8785.dumps(INPUT)).hexdigest()


@pytest.fixture
def endpoint(team: Team, settings):  # type: ignore[no-untyped-def]
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = True
    return endpoint_create(team=team, url="http://127.0.0.1:9/hook").endpoint


def test_a_grant_is_at_most_4_statements_past_the_door(agent: AgentClient, endpoint, django_assert_max_num_queries):  # type: ignore[no-untyped-def]
    agent.attempt("warm-up", tool="send_email", fingerprint=fingerprint("w"))

    with django_assert_max_num_queries(GRANT_MAX + door()):
        answer = agent.attempt("grant-1", tool="send_email", fingerprint=INPUT_FP, input=INPUT)

    assert answer.status_code == 201, answer.content
    assert answer.json()["attempt"] == 1
    assert answer.json()["step"]["proposal"]["input"] == INPUT
    step = Step.objects.get(operation_ref="grant-1")
    assert Attempt.objects.get(step=step).input == INPUT
    assert OutboxMessage.objects.filter(step_id=step.pk).count() == 1


def test_a_refusal_is_at_most_4_statements_past_the_door(agent: AgentClient, endpoint, django_assert_max_num_queries):  # type: ignore[no-untyped-def]
    agent.attempt("ref-1", tool="send_email", fingerprint=fingerprint("a"))
    agent.envelope(error_envelope(operation_ref="ref-1"))  # needs_input: the same input is refused

    with django_assert_max_num_queries(REFUSAL_MAX + door()):
        answer = agent.attempt("ref-1", tool="send_email", fingerprint=fingerprint("a"))

    assert answer.status_code == 409, answer.content
    assert answer.json()["code"] == "identical_retry"
    assert answer.json()["step"]["proposal"]["input_fingerprint"] == fingerprint("a")
    assert AuditEvent.objects.filter(step__operation_ref="ref-1", kind="refusal").count() == 1


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _gate(team: Team, ref: str, fp: str, sent: Any, now: datetime) -> Any:
    try:
        grant = services.attempt_request(
            team=team, operation_ref=ref, tool_name="send_email", fingerprint=fp, input=sent, now=now
        )
    except AttemptRefused as refused:
        return refused
    return grant


def _envelope(team: Team, ref: str, body: dict[str, Any], now: datetime) -> None:
    services.envelope_ingest(
        team=team, payload={**body, "operation_ref": ref}, dialect="canonical", raw_body=b"", now=now
    )


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def test_the_hot_grant_and_its_event_carry_the_step_as_stored(team: Team, endpoint) -> None:  # type: ignore[no-untyped-def]
    """The writer builds the step's shape once, for its step.state_changed event, and the grant
    reuses it: both must be the step as the database now holds it, every field (url, times, ids)."""
    tool_get_or_register(team=team, name="send_email")
    for number, (fp, sent) in enumerate([(INPUT_FP, INPUT), (fingerprint("b"), None)]):
        now = NOW + timedelta(seconds=2 * number)
        if number:  # the first attempt failed: the second is of a fixed input
            _envelope(team, "hot", error_envelope(), now - timedelta(seconds=1))
        grant = services.attempt_request(
            team=team, operation_ref="hot", tool_name="send_email", fingerprint=fp, input=sent, now=now
        )
        assert grant.step_shape is not None, "the answer reuses the event's shape"
        stored = Step.objects.select_related("tool", "last_envelope").get(operation_ref="hot")
        body_sent = _json(grant.as_dict())
        assert body_sent["step"] == _json(step_representation(stored))
        assert body_sent["step"]["proposal"]["input_fingerprint"] == fp
        event = DomainEvent.objects.filter(step=stored).latest("id")
        assert event.data == {"step": body_sent["step"], "cause": "attempt"}


# --- the binding's standing: under review, approved, lapsed (contract §3 v1.2) -------------------

ASK_APPROVAL = error_envelope(
    retry={"directive": "never", "max_attempts_remaining": 0},
    next_action="request_approval",
    code="AMOUNT_OVER_LIMIT",
    category="authorization",
)


def _decide(team: Team, ref: str, reviewer: Any, action: str, now: datetime) -> None:
    step = Step.objects.get(operation_ref=ref)
    with time_machine.travel(now, tick=False):
        step_decide(team=team, step_id=step.pk, actor=reviewer, action=action, reason="checked")


def _malformed(team: Team, ref: str, now: datetime) -> None:
    body = error_envelope(operation_ref=ref, category="not_a_category")
    with pytest.raises(EnvelopeInvalid):
        services.envelope_ingest(
            team=team, payload=body, dialect="canonical", raw_body=json.dumps(body).encode(), now=now
        )


A, B = fingerprint("a"), fingerprint("b")
LATER = timedelta(days=2)  # past the default approval_ttl_s


@pytest.mark.parametrize(
    ("required", "steps"),
    [
        (1, [("gate", A), ("envelope", ASK_APPROVAL), ("decide", "approve"), ("gate", A)]),
        (1, [("gate", A), ("envelope", ASK_APPROVAL), ("decide", "approve"), ("gate", B), ("gate", A)]),
        (1, [("gate", A), ("envelope", ASK_APPROVAL), ("decide", "approve"), ("envelope", error_envelope())]),
        (1, [("gate", A), ("envelope", ASK_APPROVAL), ("decide", "approve"), ("lapse", A)]),
        (2, [("gate", A), ("envelope", ASK_APPROVAL), ("decide", "approve"), ("malformed",), ("permit",), ("gate", A)]),
        (2, [("gate", A), ("envelope", ASK_APPROVAL), ("malformed",), ("unheld",), ("gate", A), ("gate", B)]),
    ],
    ids=["approved-granted", "approved-mismatch", "approved-kept", "lapsed", "under-review-permitted", "under-review"],
)
def test_the_hot_gate_keeps_the_binding_as_the_service_does(
    team: Team, endpoint, make_reviewer, required: int, steps: list[Any]
) -> None:  # type: ignore[no-untyped-def]
    tool_configure(team=team, name="send_email", settings={"required_approvals": required}, actor="test")
    reviewer = make_reviewer()
    for number, (kind, *args) in enumerate(steps):
        now = NOW + timedelta(seconds=number)
        ref = "hot"
        if kind == "envelope":
            _envelope(team, ref, args[0], now)
        elif kind == "decide":
            _decide(team, ref, reviewer, args[0], now)
        elif kind == "permit":
            _decide(team, ref, reviewer, "permit_retry", now)
        elif kind == "malformed":
            _malformed(team, ref, now)
        elif kind == "unheld":
            # A row as a step permitted before this change was left: retry_ready, under review.
            Step.objects.filter(operation_ref=ref).update(state="retry_ready", reason="retry_permitted")
        elif kind == "gate":
            _gate(team, ref, args[0], None, now)
        elif kind == "lapse":
            _gate(team, ref, args[0], None, now + LATER)

    step = Step.objects.get(operation_ref="hot")
    if steps[-1][0] == "lapse":
        assert (step.state, step.reason) == ("cancelled", "approval_expired")
    elif steps[-2:] == [("permit",), ("gate", A)] or steps[-1] == ("gate", B):
        assert (step.state, step.attempts) == ("awaiting_approval", 1)  # never granted under review
    assert audit_verify() == []
