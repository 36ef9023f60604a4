"""The guard: gate first, then the call, then the envelope; the directive comes back."""

from __future__ import annotations

import datetime as dt
import json

import httpx
import pytest
from holdpoint_sdk import (
    Failure,
    Holdpoint,
    ReportNotDelivered,
    ToolError,
    input_fingerprint,
)

from envelopes import schema

from .conftest import FakeApi, problem, step

PAYLOAD = {"customer": "cus_1", "amount": 1250, "currency": "EUR"}
PROVIDER = httpx.Request("POST", "https://api.provider.test/invoices")


def provider_answer(status: int, **kwargs: object) -> httpx.Response:
    return httpx.Response(status, request=PROVIDER, **kwargs)  # type: ignore[arg-type]


def test_a_successful_call_asks_the_gate_first_and_reports_the_result(hp: Holdpoint, api: FakeApi) -> None:
    calls: list[str] = []

    def create_invoice(payload: dict) -> dict:
        calls.append("called")
        assert api.of("attempts"), "the gate is asked before the write"
        return {"invoice_id": "inv_1"}

    with hp.guard(tool="create_invoice", operation_ref="run_81/step_4", input=PAYLOAD) as guard:
        outcome = guard.call(create_invoice, PAYLOAD)
    assert calls == ["called"]
    [gate] = api.bodies("attempts")
    assert gate == {"tool": "create_invoice", "input_fingerprint": input_fingerprint(PAYLOAD), "input": PAYLOAD}
    assert api.of("attempts")[0].headers["Idempotency-Key"] == guard.attempt_idempotency_key
    [envelope] = api.bodies("envelopes")
    assert envelope["ok"] is True and envelope["commit_state"] == "committed"
    assert envelope["result"] == {"invoice_id": "inv_1"}
    assert (envelope["operation_ref"], envelope["attempt"]) == ("run_81/step_4", 1)
    assert api.of("envelopes")[0].headers["Idempotency-Key"] == guard.envelope_idempotency_key
    assert outcome.ok and outcome.result == {"invoice_id": "inv_1"}
    assert (outcome.action, outcome.may_write) == ("stop", False)
    schema.parse_envelope(
        envelope,
        dialect="canonical",
        context=schema.ToolContext(),
        received_at=dt.datetime.now(dt.UTC),
    )


def test_a_refusal_is_an_outcome_and_the_call_is_not_made(hp: Holdpoint, api: FakeApi) -> None:
    verifying = step("verifying", "verify", reason="verification_required")
    api.script(
        "attempts",
        problem(409, "verification_required", step=verifying, directive=verifying["directive"]),
    )

    def must_not_run() -> None:
        raise AssertionError("a refused attempt must not write")

    outcome = hp.guarded_call(tool="create_invoice", operation_ref="r", input=PAYLOAD, call=must_not_run)
    assert outcome.refused and not outcome.ok
    assert outcome.refusal is not None and outcome.refusal.code == "verification_required"
    assert outcome.action == "verify"
    assert api.of("envelopes") == []


def test_the_operation_ref_is_fixed_before_the_first_write(hp: Holdpoint, api: FakeApi) -> None:
    guard = hp.guard(tool="create_invoice", input=PAYLOAD)
    assert guard.operation_ref.startswith("op_")
    guard.call(lambda: {"ok": 1})
    assert api.of("attempts")[0].url.raw_path.decode().endswith(f"/{guard.operation_ref}/attempts")
    assert api.bodies("envelopes")[0]["operation_ref"] == guard.operation_ref


def test_a_read_timeout_after_sending_is_reported_unknown_for_verification(hp: Holdpoint, api: FakeApi) -> None:
    timeout = httpx.ReadTimeout("the provider did not answer")

    def create_invoice() -> None:
        raise timeout

    outcome = hp.guarded_call(
        tool="create_invoice", operation_ref="r", input=PAYLOAD, call=create_invoice,
        verification_tool="get_invoice_by_operation_ref",
    )  # fmt: skip
    [envelope] = api.bodies("envelopes")
    assert (envelope["commit_state"], envelope["next_action"]) == ("unknown", "verify_operation")
    assert envelope["retry"] == {"directive": "never", "max_attempts_remaining": 0}
    assert envelope["safe_details"] == {"verification_tool": "get_invoice_by_operation_ref"}
    assert outcome.error is timeout and outcome.action == "verify"


def test_a_connect_error_is_a_safe_retry_with_an_absolute_not_before(hp: Holdpoint, api: FakeApi) -> None:
    def create_invoice() -> None:
        raise httpx.ConnectError("refused")

    before = dt.datetime.now(dt.UTC)
    outcome = hp.guarded_call(tool="create_invoice", operation_ref="r", input=PAYLOAD, call=create_invoice)
    [envelope] = api.bodies("envelopes")
    assert (envelope["commit_state"], envelope["next_action"]) == (
        "not_committed",
        "wait_and_retry",
    )
    retry = envelope["retry"]
    assert retry["directive"] == "after_delay"
    assert retry["max_attempts_remaining"] == 2  # max_attempts 3, this was attempt 1
    assert dt.datetime.fromisoformat(retry["not_before"]) >= before + dt.timedelta(seconds=29)
    assert outcome.action == "wait" and outcome.not_before is not None


def test_a_returned_429_response_is_a_wait_until_retry_after(hp: Holdpoint, api: FakeApi) -> None:
    before = dt.datetime.now(dt.UTC)
    outcome = hp.guarded_call(
        tool="create_invoice", operation_ref="r", input=PAYLOAD,
        call=lambda: provider_answer(429, headers={"Retry-After": "90"}),
    )  # fmt: skip
    [envelope] = api.bodies("envelopes")
    not_before = dt.datetime.fromisoformat(envelope["retry"]["not_before"])
    assert before + dt.timedelta(seconds=89) <= not_before <= before + dt.timedelta(seconds=92)
    assert envelope["category"] == "rate_limit"
    assert isinstance(outcome.error, httpx.HTTPStatusError)
    assert outcome.result.status_code == 429


def test_a_4xx_naming_a_field_asks_for_a_corrected_input(hp: Holdpoint, api: FakeApi) -> None:
    def send_email() -> httpx.Response:
        answer = provider_answer(422, json={"errors": [{"field": "recipient_email", "code": "invalid"}]})
        answer.raise_for_status()
        return answer

    outcome = hp.guarded_call(tool="send_email", operation_ref="r", input={"to": "x"}, call=send_email)
    [envelope] = api.bodies("envelopes")
    assert envelope["next_action"] == "correct_input"
    assert envelope["safe_details"] == {"field": "recipient_email"}
    assert outcome.action == "fix_input"


@pytest.mark.parametrize(("status", "category"), [(401, "authorization"), (403, "authorization"), (409, "conflict")])
def test_authorization_and_conflict_escalate(hp: Holdpoint, api: FakeApi, status: int, category: str) -> None:
    outcome = hp.guarded_call(
        tool="create_invoice",
        operation_ref="r",
        input=PAYLOAD,
        call=lambda: provider_answer(status),
    )
    [envelope] = api.bodies("envelopes")
    assert (envelope["next_action"], envelope["category"]) == ("escalate", category)
    assert outcome.action == "hold"


def test_a_5xx_from_a_side_effecting_tool_is_verified_not_retried(hp: Holdpoint, api: FakeApi) -> None:
    hp.guarded_call(tool="create_invoice", operation_ref="r", input=PAYLOAD, call=lambda: provider_answer(502))
    [envelope] = api.bodies("envelopes")
    assert (envelope["commit_state"], envelope["next_action"]) == ("unknown", "verify_operation")


def test_a_tool_error_is_reported_as_it_says(hp: Holdpoint, api: FakeApi) -> None:
    def refund() -> None:
        raise ToolError(Failure.approval_required("REFUND_ABOVE_LIMIT", safe_details={"limit": 500}))

    outcome = hp.guarded_call(tool="refund", operation_ref="r", input={"amount": 900}, call=refund)
    [envelope] = api.bodies("envelopes")
    assert (envelope["code"], envelope["next_action"]) == ("REFUND_ABOVE_LIMIT", "request_approval")
    assert envelope["safe_details"] == {"limit": 500}
    assert outcome.action == "hold" and outcome.failure is not None


def test_a_classifier_can_name_a_service_outage(hp: Holdpoint, api: FakeApi) -> None:
    until = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)

    def classify(error: BaseException) -> Failure | None:
        if isinstance(error, httpx.HTTPStatusError) and error.response.status_code == 503:
            return Failure.service_outage("PROVIDER_DOWN", not_before=until)
        return None

    hp.guarded_call(
        tool="create_invoice", operation_ref="r", input=PAYLOAD, classify=classify,
        call=lambda: provider_answer(503),
    )  # fmt: skip
    [envelope] = api.bodies("envelopes")
    assert (envelope["scope"], envelope["code"]) == ("service", "PROVIDER_DOWN")


def test_an_exception_escaping_the_block_after_the_grant_is_reported(hp: Holdpoint, api: FakeApi) -> None:
    with (
        pytest.raises(KeyError),
        hp.guard(tool="create_invoice", operation_ref="r", input=PAYLOAD) as guard,
    ):
        assert guard.begin() is None
        raise KeyError("crashed while writing")
    [envelope] = api.bodies("envelopes")
    assert envelope["commit_state"] == "unknown"
    assert guard.outcome is not None


def test_an_exception_before_the_gate_reports_nothing(hp: Holdpoint, api: FakeApi) -> None:
    with pytest.raises(KeyError), hp.guard(tool="create_invoice", operation_ref="r", input=PAYLOAD):
        raise KeyError("before any write")
    assert api.requests == []


def test_a_guard_reports_one_call(hp: Holdpoint) -> None:
    guard = hp.guard(tool="create_invoice", operation_ref="r", input=PAYLOAD)
    guard.call(lambda: None)
    with pytest.raises(RuntimeError, match="one call"):
        guard.call(lambda: None)


def test_an_undelivered_report_keeps_the_envelope_for_a_replay(hp: Holdpoint, api: FakeApi) -> None:
    api.script("envelopes", *[httpx.Response(503)] * 3)
    with pytest.raises(ReportNotDelivered) as caught:
        hp.guarded_call(tool="create_invoice", operation_ref="r", input=PAYLOAD, call=lambda: {"id": 1})
    lost = caught.value
    assert lost.result == {"id": 1} and lost.envelope["ok"] is True
    answer = hp.post_envelope(lost.envelope, idempotency_key=lost.idempotency_key)
    assert answer["directive"]["action"] == "stop"
    keys = {r.headers["Idempotency-Key"] for r in api.of("envelopes")}
    assert keys == {lost.idempotency_key}
    assert len({r.content for r in api.of("envelopes")}) == 1


def test_the_attempt_number_and_run_go_into_the_envelope(hp: Holdpoint, api: FakeApi) -> None:
    api.script(
        "attempts",
        httpx.Response(201, json={"attempt": 2, "step": step(attempts=2), "directive": step()["directive"]}),
    )
    hp.guarded_call(
        tool="create_invoice", operation_ref="r", input=PAYLOAD, run_id="run_81",
        correlation_id="corr-1", call=lambda: (_ for _ in ()).throw(httpx.ConnectError("x")),
    )  # fmt: skip
    assert api.bodies("attempts")[0]["run_id"] == "run_81"
    [envelope] = api.bodies("envelopes")
    assert (envelope["attempt"], envelope["run_id"], envelope["correlation_id"]) == (
        2,
        "run_81",
        "corr-1",
    )
    assert envelope["retry"]["max_attempts_remaining"] == 1
    assert json.dumps(envelope)  # plain JSON
