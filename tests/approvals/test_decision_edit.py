"""approvals.services.step_decide with an edited input (contract §3, §4, §7): the edit is checked
like the gate's input and must hold no secret, the approval binds the edited input, the directive
carries it until an attempt uses it, and approvals count per fingerprint."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.services import DecisionRefused, InputRefused, step_decide
from envelopes.models import AuditEvent, Decision, Step, Tool
from envelopes.proposal import INPUT_MAX_BYTES, INPUT_MAX_DEPTH, input_fingerprint
from tests.conftest import error_envelope

pytestmark = pytest.mark.django_db

REF = "run_7/refund_1"
TOOL = "issue_refund"
ASKED = {"amount": 9000, "customer": "c_1", "order": "o_9"}
EDITED = {"amount": 500, "customer": "c_1", "order": "o_9"}


def held_step(agent, value: dict[str, Any] | None = ASKED) -> Step:  # type: ignore[no-untyped-def]
    extra = {"input": value} if value is not None else {}
    granted = agent.attempt(REF, tool=TOOL, fingerprint=input_fingerprint(value or ASKED), **extra)
    assert granted.status_code == 201, granted.content
    answer = agent.envelope(
        error_envelope(
            tool=TOOL,
            operation_ref=REF,
            code="REFUND_ABOVE_LIMIT",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        )
    )
    assert answer.json()["step"]["state"] == "awaiting_approval"
    return Step.objects.get(operation_ref=REF)


def decide(team, step: Step, reviewer, **kwargs: Any):  # type: ignore[no-untyped-def]
    return step_decide(team=team, step_id=step.pk, actor=reviewer, action=kwargs.pop("action", "approve"), **kwargs)


def test_an_edited_approval_binds_the_edited_input_and_the_original_is_refused(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    result = decide(team, step, make_reviewer(), edited_input=EDITED, reason="cap the refund at the limit")
    assert result.transitioned
    decision = result.decision
    assert (decision.input_fingerprint, decision.edited, decision.edited_input) == (
        input_fingerprint(EDITED),
        True,
        EDITED,
    )
    step.refresh_from_db()
    assert (step.state, step.approval_fingerprint) == ("retry_ready", input_fingerprint(EDITED))
    link = AuditEvent.objects.get(step=step, kind="decision")
    assert link.data["input_fingerprint"] == input_fingerprint(EDITED) and link.data["edited"] is True
    # The original input is refused and goes back to a reviewer.
    original = agent.attempt(REF, tool=TOOL, fingerprint=input_fingerprint(ASKED), input=ASKED)
    assert (original.status_code, original.json()["code"]) == (409, "approval_mismatch")


def test_the_directive_carries_the_edited_input_until_an_attempt_uses_it(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    decide(team, step, make_reviewer(), edited_input=EDITED)
    directive = agent.step(REF).json()["directive"]
    assert (directive["action"], directive["input"]) == ("proceed", EDITED)
    assert directive["input_fingerprint"] == input_fingerprint(EDITED)
    # The agent fails before running it (correct_input): the binding and its input stay.
    agent.envelope(error_envelope(tool=TOOL, operation_ref=REF))
    directive = agent.step(REF).json()["directive"]
    assert (directive["action"], directive["input"]) == ("fix_input", EDITED)
    granted = agent.attempt(REF, tool=TOOL, fingerprint=input_fingerprint(EDITED), input=EDITED)
    assert granted.status_code == 201
    assert "input" not in granted.json()["directive"]
    assert "input" not in agent.step(REF).json()["directive"]


def test_a_plain_approval_binds_the_proposal_and_the_directive_carries_no_input(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    decision = decide(team, step, make_reviewer()).decision
    assert decision.input_fingerprint == input_fingerprint(ASKED)
    assert (decision.edited, decision.edited_input) == (False, None)
    body = agent.step(REF).json()
    assert "input" not in body["directive"]
    assert body["decisions"][0]["input_fingerprint"] == input_fingerprint(ASKED)
    assert body["decisions"][0]["edited"] is False


def test_an_edit_equal_to_the_proposal_is_a_plain_approval(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    decision = decide(team, step, make_reviewer(), edited_input=dict(reversed(list(ASKED.items())))).decision
    assert (decision.edited, decision.input_fingerprint) == (False, input_fingerprint(ASKED))


def test_a_decision_other_than_approve_records_no_fingerprint(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    decision = decide(team, step, make_reviewer(), action="reject", reason="too much").decision
    assert (decision.input_fingerprint, decision.edited) == ("", False)
    assert agent.step(REF).json()["decisions"][0]["input_fingerprint"] is None


def deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("edited", "rule"),
    [
        ([EDITED], "type"),
        ({"blob": "x" * INPUT_MAX_BYTES}, "max_bytes"),
        (deep(INPUT_MAX_DEPTH + 1), "max_depth"),
        ({"amount": 2**60}, "canonical"),
        ({**EDITED, "api_key": "anything"}, "no_secret"),
        ({**EDITED, "note": "charge with sk-live-4eC39HqLyjWDarjtT1zdp7dc"}, "no_secret"),
        ({**EDITED, "items": [{"dsn": "postgres://u:p@db.internal/x"}]}, "no_secret"),
        ({**EDITED, "note": "nul\x00byte"}, "storable"),
    ],
)
def test_an_edit_that_breaks_a_rule_is_refused_naming_input_and_decides_nothing(
    agent, team, make_reviewer, edited: Any, rule: str
) -> None:
    step = held_step(agent)
    with pytest.raises(InputRefused) as refused:
        decide(team, step, make_reviewer(), edited_input=edited)
    assert (refused.value.field, refused.value.rule) == ("input", rule)
    assert str(refused.value)
    assert not Decision.objects.exists()
    step.refresh_from_db()
    assert step.state == "awaiting_approval"


def test_an_edit_is_refused_without_a_proposal_input(agent, team, make_reviewer) -> None:
    step = held_step(agent, value=None)
    with pytest.raises(InputRefused) as refused:
        decide(team, step, make_reviewer(), edited_input=EDITED)
    assert refused.value.rule == "not_editable"
    assert not Decision.objects.exists()


def test_an_edit_is_refused_when_the_proposal_was_redacted(agent, team, make_reviewer) -> None:
    step = held_step(agent, value={**ASKED, "token": "t0k3n-secret-value"})
    with pytest.raises(InputRefused) as refused:
        decide(team, step, make_reviewer(), edited_input=EDITED)
    assert refused.value.rule == "not_editable"


def test_only_an_approval_may_carry_an_edited_input(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    with pytest.raises(InputRefused) as refused:
        decide(team, step, make_reviewer(), action="reject", reason="no", edited_input=EDITED)
    assert refused.value.rule == "not_approve"


def two_approvals(team) -> None:  # type: ignore[no-untyped-def]
    Tool.objects.filter(team=team, name=TOOL).update(required_approvals=2)


def test_with_two_approvals_an_edit_starts_a_new_count(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    two_approvals(team)
    rita, sam = make_reviewer("rita"), make_reviewer("sam")
    assert not decide(team, step, rita).transitioned  # ASKED: 1
    edit = decide(team, step, sam, edited_input=EDITED)  # EDITED: 1, not ASKED's second
    assert (edit.transitioned, edit.approvals_so_far) == (False, 1)
    step.refresh_from_db()
    assert (step.state, step.approval_fingerprint) == ("awaiting_approval", input_fingerprint(ASKED))
    # rita agrees with the edit: two reviewers approved the same fingerprint.
    final = decide(team, step, rita, edited_input=EDITED)
    assert (final.transitioned, final.approvals_so_far) == (True, 2)
    step.refresh_from_db()
    assert (step.state, step.approval_fingerprint) == ("retry_ready", input_fingerprint(EDITED))
    assert agent.step(REF).json()["directive"]["input"] == EDITED


def test_with_two_approvals_approvals_of_different_inputs_do_not_add_up(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    two_approvals(team)
    decide(team, step, make_reviewer("rita"), edited_input=EDITED)
    other = {**EDITED, "amount": 400}
    assert not decide(team, step, make_reviewer("sam"), edited_input=other).transitioned
    assert not decide(team, step, make_reviewer("una")).transitioned  # the agent's input: 1
    step.refresh_from_db()
    assert step.state == "awaiting_approval"
    assert decide(team, step, make_reviewer("vic")).transitioned  # the agent's input: 2
    step.refresh_from_db()
    assert step.approval_fingerprint == input_fingerprint(ASKED)
    assert "input" not in agent.step(REF).json()["directive"]


def test_a_reviewer_cannot_approve_the_same_input_twice(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    two_approvals(team)
    rita = make_reviewer("rita")
    decide(team, step, rita, edited_input=EDITED)
    with pytest.raises(DecisionRefused) as refused:
        decide(team, step, rita, edited_input=EDITED)
    assert refused.value.already_decided


def test_an_edited_approval_asked_about_again_is_the_proposal_under_review(agent, team, make_reviewer) -> None:
    step = held_step(agent)
    decide(team, step, make_reviewer("rita"), edited_input=EDITED)
    # Before running it, the agent asks for approval again: what is under review is the edit.
    answer = agent.envelope(
        error_envelope(
            tool=TOOL,
            operation_ref=REF,
            code="REFUND_ABOVE_LIMIT",
            category="authorization",
            retry={"directive": "never", "max_attempts_remaining": 0},
            next_action="request_approval",
        )
    )
    assert answer.json()["step"]["proposal"]["input"] == EDITED  # the ingest answer says so too
    body = agent.step(REF).json()
    assert body["state"] == "awaiting_approval"
    assert (body["proposal"]["input"], body["proposal"]["attempt"]) == (EDITED, None)
    assert body["proposal"]["input_fingerprint"] == input_fingerprint(EDITED)
    listed = agent.get("/api/v1/steps").json()["results"][0]
    assert listed["proposal"] == body["proposal"]
    decide(team, step, make_reviewer("sam"))
    assert agent.step(REF).json()["directive"]["input"] == EDITED
