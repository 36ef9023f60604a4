"""What a tool call raised -> the envelope Holdpoint is told (pure functions)."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import math
import uuid

import httpx
import pytest
from holdpoint_sdk import (
    Failure,
    ToolError,
    canonical_json,
    failure_for_exception,
    field_named_in,
    input_fingerprint,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopes import schema

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
REQUEST = httpx.Request("POST", "https://api.provider.test/invoices")


def response(status: int, *, json: object = None, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json=json, headers=headers, request=REQUEST)


def raised(status: int, **kwargs: object) -> httpx.HTTPStatusError:
    answer = response(status, **kwargs)  # type: ignore[arg-type]
    return httpx.HTTPStatusError(f"HTTP {status}", request=REQUEST, response=answer)


# --- the fingerprint -----------------------------------------------------------------------------


def test_the_fingerprint_is_the_sha256_of_canonical_json() -> None:
    value = {"b": [1, 2.5, None], "a": "é"}
    assert canonical_json(value) == '{"a":"é","b":[1,2.5,null]}'.encode()
    assert input_fingerprint(value) == hashlib.sha256(canonical_json(value)).hexdigest()


def test_key_order_does_not_change_the_fingerprint_but_a_value_does() -> None:
    assert input_fingerprint({"a": 1, "b": 2}) == input_fingerprint({"b": 2, "a": 1})
    assert input_fingerprint({"a": 1}) != input_fingerprint({"a": 2})


def test_common_python_values_have_a_stable_form() -> None:
    value = {"at": NOW, "amount": decimal.Decimal("10.50"), "id": uuid.UUID(int=1)}
    assert canonical_json(value) == (
        b'{"amount":"10.50","at":"2026-11-29T12:00:00+00:00","id":"00000000-0000-0000-0000-000000000001"}'
    )


def test_values_without_a_json_form_are_refused() -> None:
    with pytest.raises(ValueError):
        input_fingerprint({"x": math.nan})
    with pytest.raises(TypeError):
        input_fingerprint({"x": object()})


# --- the mapping table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (httpx.ConnectError("refused"), ("not_committed", "wait_and_retry", "dependency")),
        (httpx.ConnectTimeout("slow"), ("not_committed", "wait_and_retry", "dependency")),
        (httpx.PoolTimeout("busy"), ("not_committed", "wait_and_retry", "dependency")),
        (httpx.ReadTimeout("slow"), ("unknown", "verify_operation", "dependency")),
        (httpx.WriteTimeout("slow"), ("unknown", "verify_operation", "dependency")),
        (httpx.RemoteProtocolError("dropped"), ("unknown", "verify_operation", "dependency")),
        (raised(429), ("not_committed", "wait_and_retry", "rate_limit")),
        (raised(408), ("not_committed", "wait_and_retry", "dependency")),
        (raised(401), ("not_committed", "escalate", "authorization")),
        (raised(403), ("not_committed", "escalate", "authorization")),
        (raised(409), ("not_committed", "escalate", "conflict")),
        (raised(422, json={"field": "email"}), ("not_committed", "correct_input", "validation")),
        (raised(400, json={"message": "no"}), ("not_committed", "escalate", "validation")),
        (raised(500), ("unknown", "verify_operation", "dependency")),
        (raised(503), ("unknown", "verify_operation", "dependency")),
        (KeyError("boom"), ("unknown", "verify_operation", "internal")),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else "",
)
def test_what_was_raised_maps_to_commit_state_and_next_action(
    error: BaseException, expected: tuple[str, str, str]
) -> None:
    failure = failure_for_exception(error, now=NOW)
    assert (failure.commit_state, failure.next_action, failure.category) == expected


def test_a_timeout_after_sending_is_unknown_but_before_sending_is_a_safe_retry() -> None:
    after = failure_for_exception(httpx.ReadTimeout("slow"), now=NOW)
    before = failure_for_exception(httpx.ConnectTimeout("slow"), now=NOW, default_delay=20)
    assert (after.commit_state, after.retry_directive) == ("unknown", "never")
    assert (before.commit_state, before.retry_directive) == ("not_committed", "after_delay")
    assert before.not_before == NOW + dt.timedelta(seconds=20)


def test_429_turns_retry_after_seconds_into_an_absolute_not_before() -> None:
    failure = failure_for_exception(raised(429, headers={"Retry-After": "120"}), now=NOW)
    assert failure.not_before == NOW + dt.timedelta(seconds=120)
    assert failure.safe_details == {"retry_after": 120}


def test_429_reads_an_http_date_too() -> None:
    later = NOW + dt.timedelta(minutes=5)
    header = later.strftime("%a, %d %b %Y %H:%M:%S GMT")
    failure = failure_for_exception(raised(429, headers={"Retry-After": header}), now=NOW)
    assert failure.not_before == later


def test_429_without_retry_after_waits_the_default_delay() -> None:
    failure = failure_for_exception(raised(429), now=NOW, default_delay=45)
    assert failure.not_before == NOW + dt.timedelta(seconds=45)


def test_a_tool_without_side_effects_may_retry_after_a_timeout_or_a_5xx() -> None:
    for error in (httpx.ReadTimeout("slow"), raised(503, headers={"Retry-After": "9"})):
        failure = failure_for_exception(error, side_effects=False, now=NOW)
        assert (failure.commit_state, failure.next_action) == ("not_committed", "wait_and_retry")


def test_a_tool_error_says_exactly_what_failed() -> None:
    wanted = Failure.invalid_input("INVALID_RECIPIENT_ADDRESS", field="recipient_email")
    assert failure_for_exception(ToolError(wanted), now=NOW) is wanted


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"field": "email"}, "email"),
        ({"error": {"type": "invalid_request_error", "param": "amount"}}, "amount"),  # Stripe
        ({"detail": [{"loc": ["body", "customer", "email"], "msg": "bad"}]}, "email"),  # FastAPI
        ({"invalid_params": [{"name": "age", "reason": "must be positive"}]}, "age"),  # RFC 9457
        ({"errors": [{"source": {"pointer": "/data/attributes/title"}}]}, "title"),  # JSON:API
        ({"errors": {"email": ["is invalid"]}}, "email"),  # Rails
        ({"errors": [{"field": "retry.not_before", "rule": "required"}]}, "retry.not_before"),
        ({"message": "bad request"}, None),
        ({"name": "ValidationError"}, None),
        ("not json", None),
        (None, None),
    ],
)
def test_the_field_an_error_body_blames(body: object, field: str | None) -> None:
    assert field_named_in(body) == field


def test_a_4xx_naming_a_field_asks_for_corrected_input() -> None:
    failure = failure_for_exception(raised(400, json={"error": {"param": "recipient_email"}}), now=NOW)
    assert failure.next_action == "correct_input"
    assert failure.safe_details == {"field": "recipient_email"}
    assert failure.retry_directive == "after_input_fix"


def test_messages_never_carry_the_exceptions_text() -> None:
    failure = failure_for_exception(RuntimeError("password=hunter2"), now=NOW)
    assert "hunter2" not in (failure.agent_message or "")


# --- every envelope the SDK builds passes the server's own contract check -----------------------

FAILURES = st.one_of(
    st.builds(
        Failure.invalid_input,
        st.just("INVALID_INPUT"),
        field=st.sampled_from(["email", "amount"]),
    ),
    st.builds(
        Failure.retry_later,
        st.just("RATE_LIMITED"),
        not_before=st.just(NOW + dt.timedelta(seconds=30)),
    ),
    st.builds(Failure.outcome_unknown),
    st.builds(Failure.approval_required, st.just("REFUND_ABOVE_LIMIT")),
    st.builds(Failure.service_outage, st.just("PROVIDER_DOWN"), not_before=st.just(NOW)),
    st.builds(
        Failure.escalate,
        st.just("FORBIDDEN"),
        category=st.sampled_from(["authorization", "conflict", "validation"]),
    ),
    st.sampled_from(
        [
            failure_for_exception(error, now=NOW, side_effects=side_effects)
            for side_effects in (True, False)
            for error in (
                httpx.ConnectError("x"),
                httpx.ReadTimeout("x"),
                raised(429, headers={"Retry-After": "5"}),
                raised(401),
                raised(409),
                raised(422, json={"field": "email"}),
                raised(404),
                raised(500),
                ValueError("x"),
            )
        ]
    ),
)


@settings(deadline=None)  # the server's JSON Schema check is slow on a busy machine
@given(failure=FAILURES, remaining=st.integers(min_value=0, max_value=5))
def test_every_error_envelope_satisfies_the_contract(failure: Failure, remaining: int) -> None:
    envelope = failure.envelope(
        tool="create_invoice",
        operation_ref="run_81/step_4",
        attempts_remaining=remaining,
        occurred_at=NOW,
        attempt=1,
        run_id="run_81",
    )
    parsed = schema.parse_envelope(envelope, dialect="canonical", context=schema.ToolContext(), received_at=NOW)
    assert (parsed.commit_state, parsed.next_action) == (failure.commit_state, failure.next_action)
    if failure.next_action == "wait_and_retry":
        assert parsed.not_before is not None
