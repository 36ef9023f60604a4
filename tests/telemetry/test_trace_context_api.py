"""The API's trace context (contract §13): a call's traceparent is kept with its attempt or
envelope and on the step (`trace_id`, the latest call's); a malformed one is ignored."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envelopes.models import Attempt, Envelope, Step
from tests.conftest import AgentClient, error_envelope, fingerprint

pytestmark = pytest.mark.django_db

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"
SPAN_A = "00f067aa0ba902b7"
SPAN_B = "b7ad6b7169203331"
REF = "run_81/step_4"


def traced(trace_id: str, span_id: str, **more: str) -> dict[str, str]:
    return {"HTTP_TRACEPARENT": f"00-{trace_id}-{span_id}-01", **more}


def test_an_attempt_keeps_its_trace_and_the_step_shows_it(agent: AgentClient) -> None:
    answer = agent.attempt(REF, tool="send_email", fingerprint=fingerprint("a"), headers=traced(TRACE_A, SPAN_A))
    assert answer.status_code == 201
    assert answer.json()["step"]["trace_id"] == TRACE_A
    assert Attempt.objects.get().trace_id == TRACE_A
    step = Step.objects.get()
    assert (step.trace_id, step.trace_parent_id) == (TRACE_A, SPAN_A)
    assert agent.step(REF).json()["trace_id"] == TRACE_A


def test_the_step_keeps_the_latest_calls_trace(agent: AgentClient) -> None:
    agent.attempt(REF, tool="send_email", fingerprint=fingerprint("a"), headers=traced(TRACE_A, SPAN_A))
    answer = agent.envelope(error_envelope(), **traced(TRACE_B, SPAN_B))
    assert answer.status_code == 201
    assert answer.json()["step"]["trace_id"] == TRACE_B
    assert Envelope.objects.get().trace_id == TRACE_B
    assert Attempt.objects.get().trace_id == TRACE_A  # each row keeps its own call's
    # A call without a traceparent changes nothing of it.
    agent.attempt(REF, tool="send_email", fingerprint=fingerprint("b"))
    assert agent.step(REF).json()["trace_id"] == TRACE_B
    assert Attempt.objects.order_by("number").last().trace_id == ""  # type: ignore[union-attr]


def test_a_step_without_any_trace_says_null(agent: AgentClient) -> None:
    assert agent.envelope(error_envelope()).json()["step"]["trace_id"] is None
    assert Envelope.objects.get().trace_id == ""


def test_a_refused_attempt_still_records_the_trace_on_the_step(agent: AgentClient) -> None:
    agent.envelope(error_envelope())  # needs_input
    refused = agent.attempt(REF, tool="send_email", fingerprint=fingerprint("x"), headers=traced(TRACE_A, SPAN_A))
    # The step was fixed at the envelope's input: the same (absent) fingerprint is not this one,
    # so whatever the gate answers, the step names the call's trace.
    assert refused.status_code in (201, 409)
    assert Step.objects.get().trace_id == TRACE_A


def test_a_malformed_traceparent_is_ignored(agent: AgentClient) -> None:
    answer = agent.attempt(
        REF,
        tool="send_email",
        fingerprint=fingerprint("a"),
        headers={"HTTP_TRACEPARENT": f"00-{TRACE_A.upper()}-{SPAN_A}-01"},
    )
    assert answer.status_code == 201
    assert answer.json()["step"]["trace_id"] is None


# Header values as a WSGI server hands them over: latin-1 text (PEP 3333).
junk = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=200)
near_miss = st.builds(
    lambda version, trace, span, flags, tail: f"{version}-{trace}-{span}-{flags}{tail}",
    st.sampled_from(["00", "01", "ff", "0", "zz", "FF"]),
    st.text(alphabet="0123456789abcdefABCDEF-", min_size=0, max_size=34),
    st.text(alphabet="0123456789abcdef0", min_size=0, max_size=18),
    st.text(alphabet="0123456789abcdefx", min_size=0, max_size=3),
    st.sampled_from(["", "-", "-x", " ", "\t", "\x00", "é"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traceparent=st.one_of(junk, near_miss), tracestate=st.one_of(st.none(), junk))
def test_junk_trace_headers_never_fail_a_call(agent: AgentClient, traceparent: str, tracestate: str | None) -> None:
    headers = {"HTTP_TRACEPARENT": traceparent}
    if tracestate is not None:
        headers["HTTP_TRACESTATE"] = tracestate
    granted = agent.attempt(REF, tool="send_email", fingerprint=fingerprint(traceparent), headers=headers)
    assert granted.status_code in (201, 409), granted.content  # a grant, or the gate's own refusal
    read = agent.step(REF, **headers)
    assert read.status_code == 200
    trace_id = read.json()["trace_id"]
    assert trace_id is None or (len(trace_id) == 32 and trace_id in traceparent)
    listed = agent.get("/api/v1/steps", **headers)
    assert listed.status_code == 200
