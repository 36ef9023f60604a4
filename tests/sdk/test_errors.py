"""problem+json answers become typed errors."""

from __future__ import annotations

import httpx
import pytest
from holdpoint_sdk import (
    AttemptRefused,
    Conflict,
    Holdpoint,
    HoldpointError,
    HoldpointUnavailable,
    NotFound,
    ServerError,
    Throttled,
    Unauthorized,
    ValidationFailed,
)

from .conftest import BASE, KEY, FakeApi, directive, problem, step


def client(api: FakeApi) -> Holdpoint:
    return Holdpoint(BASE, KEY, transport=httpx.MockTransport(api), sleep=lambda s: None)


def test_a_schema_error_is_validation_failed_with_the_field_errors(api: FakeApi) -> None:
    errors = [{"field": "retry.not_before", "rule": "required"}]
    api.script("envelopes", problem(422, "schema_invalid", errors=errors))
    with pytest.raises(ValidationFailed) as caught:
        client(api).post_envelope({"ok": False})
    error = caught.value
    assert (error.code, error.status, error.errors) == ("schema_invalid", 422, errors)
    assert error.problem["type"].endswith("/schema_invalid")
    assert isinstance(error, HoldpointError)


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (400, "malformed_json", ValidationFailed),
        (401, "authentication_failed", Unauthorized),
        (403, "permission_denied", Unauthorized),
        (404, "not_found", NotFound),
        (409, "tool_mismatch", Conflict),
        (413, "payload_too_large", ValidationFailed),
    ],
)
def test_each_status_has_its_error(api: FakeApi, status: int, code: str, kind: type) -> None:
    api.script("step", problem(status, code))
    with pytest.raises(kind) as caught:
        client(api).get_step("run_81/step_4")
    assert (caught.value.code, caught.value.status) == (code, status)
    assert not isinstance(caught.value, AttemptRefused)


def test_a_gate_refusal_carries_the_step_the_directive_and_retry_after(api: FakeApi) -> None:
    waiting = step("waiting_retry", "wait", not_before="2026-11-29T12:05:00Z")
    api.script(
        "attempts",
        problem(409, "retry_not_before", step=waiting, directive=waiting["directive"], retry_after=42),
    )
    with pytest.raises(AttemptRefused) as caught:
        client(api).request_attempt("run_81/step_4", tool="create_invoice", input_fingerprint="0" * 64)
    refusal = caught.value
    assert refusal.code == "retry_not_before"
    assert refusal.step["state"] == "waiting_retry"
    assert refusal.directive == directive("wait", not_before="2026-11-29T12:05:00Z")
    assert refusal.retry_after == 42
    assert isinstance(refusal, Conflict)


def test_throttling_is_throttled_with_retry_after(api: FakeApi) -> None:
    api.script("steps", problem(429, "throttled", retry_after=7))
    with pytest.raises(Throttled) as caught:
        client(api).list_steps_page()
    assert caught.value.retry_after == 7


def test_a_server_error_without_json_still_has_a_code(api: FakeApi) -> None:
    api.script("step", *[httpx.Response(500, text="<html>oops</html>")] * 3)
    with pytest.raises(ServerError) as caught:
        client(api).get_step("x")
    assert (caught.value.code, caught.value.status) == ("http_500", 500)


def test_no_answer_is_holdpoint_unavailable(api: FakeApi) -> None:
    api.script("step", *[httpx.ConnectError("refused")] * 3)
    with pytest.raises(HoldpointUnavailable) as caught:
        client(api).get_step("x")
    assert caught.value.status is None and caught.value.code == "unavailable"


def test_a_refusal_that_created_no_step_is_still_a_refusal(api: FakeApi) -> None:
    halted = directive("wait", not_before="2026-11-29T12:05:00Z", reason="tool_halted")
    api.script("attempts", problem(409, "tool_halted", step=None, directive=halted, retry_after=60))
    with pytest.raises(AttemptRefused) as caught:
        client(api).request_attempt("new/step", tool="charge_card", input_fingerprint="0" * 64)
    assert caught.value.step is None
    assert caught.value.directive == halted
    assert caught.value.retry_after == 60
