"""The attempt gate's `input` (contract §4, Proposed input) over HTTP: recomputed fingerprint,
limits, redaction before storage, and the step's `proposal`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.apps import apps
from django.core import serializers
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.services import step_decide
from envelopes.models import Attempt, AuditEvent, ProposedInput, Step
from envelopes.proposal import INPUT_MAX_BYTES, INPUT_MAX_DEPTH, input_fingerprint
from tests.conftest import error_envelope

pytestmark = pytest.mark.django_db

REF = "run_7/refund_1"
TOOL = "issue_refund"
REFUND = {"amount": 120, "customer": "c_1", "order": "o_9"}


def attempt(agent, value: Any, *, fingerprint: str | None = None, ref: str = REF, **extra: Any):  # type: ignore[no-untyped-def]
    return agent.attempt(ref, tool=TOOL, fingerprint=fingerprint or input_fingerprint(value), input=value, **extra)


def ask_approval(agent, ref: str = REF) -> None:  # type: ignore[no-untyped-def]
    answer = agent.envelope(
        error_envelope(
            tool=TOOL,
            operation_ref=ref,
            code="REFUND_ABOVE_LIMIT",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
            safe_details={"limit": 500},
        )
    )
    assert answer.json()["step"]["state"] == "awaiting_approval"


def test_a_granted_attempt_stores_its_input_and_the_step_shows_it_as_proposal(agent) -> None:
    response = attempt(agent, REFUND)
    assert response.status_code == 201, response.content
    proposal = response.json()["step"]["proposal"]
    assert proposal["attempt"] == 1
    assert proposal["input"] == REFUND
    assert proposal["input_fingerprint"] == input_fingerprint(REFUND)
    assert proposal["input_redacted"] is False
    assert proposal["proposed_at"]
    assert Attempt.objects.get().input == REFUND
    assert agent.step(REF).json()["proposal"] == proposal


def test_without_input_the_step_has_a_proposal_without_input_and_no_attempt_has_none(agent) -> None:
    assert agent.step(REF).status_code == 404
    assert agent.attempt(REF, tool=TOOL, fingerprint=input_fingerprint(REFUND)).status_code == 201
    proposal = agent.step(REF).json()["proposal"]
    assert (proposal["attempt"], proposal["input"], proposal["input_redacted"]) == (1, None, False)
    agent.envelope(error_envelope(tool="send_email", operation_ref="never_tried"))
    assert agent.step("never_tried").json()["proposal"] is None


def test_the_fingerprint_is_recomputed_and_a_mismatch_is_422_naming_it(agent) -> None:
    response = attempt(agent, REFUND, fingerprint=input_fingerprint({**REFUND, "amount": 9000}))
    assert response.status_code == 422
    assert response["Content-Type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "fingerprint_mismatch"
    assert problem["errors"] == [{"field": "input_fingerprint", "rule": "matches_input"}]
    assert not Step.objects.exists() and not Attempt.objects.exists()


def test_an_uppercase_fingerprint_of_the_input_is_accepted(agent) -> None:
    assert attempt(agent, REFUND, fingerprint=input_fingerprint(REFUND).upper()).status_code == 201


def deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ([REFUND], "type"),
        ("amount=120", "type"),
        (120, "type"),
        ({"blob": "x" * INPUT_MAX_BYTES}, "max_bytes"),
        (deep(INPUT_MAX_DEPTH + 1), "max_depth"),
        ({"amount": 2**63}, "canonical"),
    ],
)
def test_an_input_the_gate_refuses_is_422_naming_input_and_stores_nothing(agent, value: Any, rule: str) -> None:
    response = agent.attempt(REF, tool=TOOL, fingerprint="a" * 64, input=value)
    assert response.status_code == 422, response.content
    problem = response.json()
    assert problem["errors"] == [{"field": "input", "rule": rule}]
    assert not Step.objects.exists() and not Attempt.objects.exists()


def test_a_null_input_is_422_naming_input(agent) -> None:
    response = agent.attempt(REF, tool=TOOL, fingerprint="a" * 64, input=None)
    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == ["input"]


def test_an_input_at_the_depth_limit_is_granted(agent) -> None:
    assert attempt(agent, deep(INPUT_MAX_DEPTH)).status_code == 201


SECRETS = {
    "sk-live-4eC39HqLyjWDarjtT1zdp7dc",
    "hunter2-very-secret",
    "AKIAIOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "pg-pass-0xdeadbeef",
    "cookie-value-31337",
    "xoxb-slack-bot-token-77",
}
SECRET_INPUT = {
    "amount": 120,
    "api_key": "sk-live-4eC39HqLyjWDarjtT1zdp7dc",  # a credential-named key
    "customer": {"db_password": "hunter2-very-secret", "Cookie": "cookie-value-31337"},  # nested, any case
    "notes": ["ok", ["AWS key AKIAIOSFODNN7EXAMPLE in an array in an array"]],  # a value deep in arrays
    "auth": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "payload": json.dumps({"dsn": "postgres://svc:pg-pass-0xdeadbeef@db.internal:5432/app"}),  # JSON in a string
    "x-slack-token": "xoxb-slack-bot-token-77",
}


def database_dump() -> str:
    """Every row of every model, as Django serialises them."""
    rows = []
    for model in apps.get_models():
        rows.append(serializers.serialize("json", model._default_manager.all()))
    return "\n".join(rows)


def test_secrets_in_keys_values_arrays_and_json_strings_never_reach_the_database(agent, team, make_reviewer) -> None:
    response = attempt(agent, SECRET_INPUT)
    assert response.status_code == 201, response.content
    proposal = response.json()["step"]["proposal"]
    assert proposal["input_redacted"] is True
    stored = proposal["input"]
    assert stored["api_key"] == stored["x-slack-token"] == "[REDACTED:key_name]"
    assert stored["customer"] == {"db_password": "[REDACTED:key_name]", "Cookie": "[REDACTED:key_name]"}
    assert stored["amount"] == 120 and stored["notes"][0] == "ok"
    # Refused with approval_mismatch after an approval: the refused input is kept, redacted, too.
    ask_approval(agent)
    step_decide(team=team, step_id=Step.objects.get().pk, actor=make_reviewer(), action="approve")
    assert attempt(agent, {**SECRET_INPUT, "amount": 9000}).status_code == 409
    assert ProposedInput.objects.get().input_redacted
    dump = database_dump() + json.dumps(list(AuditEvent.objects.values("data")))
    for secret in SECRETS:
        assert secret not in dump
    assert "[REDACTED:" in dump


def test_an_input_refused_with_approval_mismatch_becomes_the_proposal_under_review(agent, team, make_reviewer) -> None:
    assert attempt(agent, REFUND).status_code == 201
    ask_approval(agent)
    step_decide(team=team, step_id=Step.objects.get().pk, actor=make_reviewer(), action="approve")
    bigger = {**REFUND, "amount": 9000}
    problem = attempt(agent, bigger).json()
    assert problem["code"] == "approval_mismatch"
    assert problem["step"]["proposal"]["input"] == bigger
    assert problem["step"]["proposal"]["attempt"] is None  # no attempt was granted for it
    # Refused while it waits: another input does not replace what the reviewer is reviewing.
    assert attempt(agent, {**REFUND, "amount": 1}).json()["code"] == "approval_pending"
    shown = agent.step(REF).json()["proposal"]
    assert (shown["input"], shown["input_fingerprint"]) == (bigger, input_fingerprint(bigger))
    assert Step.objects.get().approval_fingerprint == input_fingerprint(bigger)


def test_a_replayed_attempt_with_input_gets_the_same_answer(agent) -> None:
    first = attempt(agent, REFUND, headers={"HTTP_IDEMPOTENCY_KEY": "k1"})
    again = attempt(agent, REFUND, headers={"HTTP_IDEMPOTENCY_KEY": "k1"})
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Attempt.objects.count() == 1


def statements_of_a_grant(agent, ref: str, value: dict[str, Any] | None) -> list[str]:  # type: ignore[no-untyped-def]
    extra = {"input": value} if value is not None else {}
    with CaptureQueriesContext(connection) as captured:
        response = agent.attempt(ref, tool=TOOL, fingerprint=input_fingerprint(value or {}), **extra)
    assert response.status_code == 201
    return [query["sql"].split()[0] for query in captured.captured_queries]


def test_sending_input_costs_the_gate_no_extra_statement(agent) -> None:
    attempt(agent, REFUND, ref="warm_up")  # the tool is registered once
    for index in range(2):  # a new step, then a second attempt on it
        assert attempt(agent, REFUND, ref=f"s_{index}").status_code == 201
        agent.envelope(error_envelope(tool=TOOL, operation_ref=f"s_{index}"))
        agent.envelope(error_envelope(tool=TOOL, operation_ref=f"n_{index}"))
    assert statements_of_a_grant(agent, "new_a", REFUND) == statements_of_a_grant(agent, "new_b", None)
    with_input = statements_of_a_grant(agent, "s_0", {**REFUND, "amount": 1})
    without = statements_of_a_grant(agent, "s_1", None)
    assert with_input == without


def test_a_binding_no_row_holds_shows_its_fingerprint_without_input(agent) -> None:
    """A step whose binding names an input that no row holds (an approval_mismatch refused before
    inputs were kept) shows that fingerprint with no input, not the latest attempt's input."""
    assert attempt(agent, REFUND).status_code == 201
    ask_approval(agent)
    other = input_fingerprint({**REFUND, "amount": 9000})
    Step.objects.filter(operation_ref=REF).update(approval_fingerprint=other)
    proposal = agent.step(REF).json()["proposal"]
    assert (proposal["input_fingerprint"], proposal["input"], proposal["attempt"]) == (other, None, None)


def test_no_secret_of_an_input_reaches_the_logs(agent, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    with caplog.at_level(logging.DEBUG):
        assert attempt(agent, SECRET_INPUT).status_code == 201
        assert attempt(agent, SECRET_INPUT, ref="other", fingerprint="b" * 64).status_code == 422
        assert agent.attempt("third", tool=TOOL, fingerprint="c" * 64, input=[SECRET_INPUT]).status_code == 422
    for secret in SECRETS:
        assert secret not in caplog.text
