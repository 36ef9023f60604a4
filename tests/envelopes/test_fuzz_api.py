"""Odd input never answers 5xx: generated envelopes, attempts and verification reports, near the
contract's shapes and far from them, each answered with a 2xx or a problem+json naming its code."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from envelopes import schema
from tests.conftest import error_envelope, success_envelope, unknown_outcome
from tests.odd_input import (
    AGENT_ROUTES,
    API_FRAMEWORK_PARAMS,
    CRAFTED_CURSORS,
    HARMLESS_CURSORS,
    Route,
    odd_query,
    odd_segment,
    sweep,
)
from tests.odd_input import url as odd_url

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Times at the edges of what datetime holds, of what an offset can push out of range, and of the
# bounds the API sets; and times that look right but are not (February 30th, second 60).
EDGE_TIMES = [
    "9999-12-31T23:59:59+00:00",
    "9999-12-31T23:59:59-23:59",
    "9999-12-31T23:59:59.999999999Z",
    "0001-01-01T00:00:00+23:59",
    "0001-01-01T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "2026-02-30T12:00:00Z",
    "2026-11-29T23:59:60Z",
    "2026-11-29t12:00:00z",
]


def _format(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


_OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda minutes: timezone(timedelta(minutes=minutes)))
TIMES = st.one_of(
    st.sampled_from(EDGE_TIMES),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_OFFSETS).map(_format),
    # Near now, where the bounds are.
    st.integers(-4000 * 86400, 400 * 86400).map(lambda s: _format(datetime.now(UTC) + timedelta(seconds=s))),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
ODD = st.one_of(
    TIMES,
    JSON,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(["", "\u0000", "\ud800", "x" * 2000, "sk-live0123456789abcdef", 1e308, -0.0]),
)
FIELDS = [
    "ok",
    "tool",
    "operation_ref",
    "correlation_id",
    "run_id",
    "attempt",
    "occurred_at",
    "code",
    "category",
    "commit_state",
    "next_action",
    "scope",
    "resource_id",
    "safe_details",
    "agent_message",
    "user_message",
    "verification",
    "result",
    ("retry", "directive"),
    ("retry", "not_before"),
    ("retry", "max_attempts_remaining"),
    ("verification", "checked_at"),
    ("safe_details", "field"),
]
BASES = [
    error_envelope(),
    unknown_outcome(),
    success_envelope(),
    error_envelope(
        next_action="wait_and_retry",
        retry={"directive": "after_delay", "not_before": "2026-11-29T12:00:00Z", "max_attempts_remaining": 2},
    ),
]


@st.composite
def near_envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A valid envelope with one to three fields changed to odd values."""
    body = json.loads(json.dumps(draw(st.sampled_from(BASES))))
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(FIELDS))
        value = draw(ODD)
        if isinstance(field, tuple):
            parent = body.setdefault(field[0], {})
            if isinstance(parent, dict):
                parent[field[1]] = value
        elif draw(st.booleans()) or field not in body:
            body[field] = value
        else:
            del body[field]
    return body


@st.composite
def timed_envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A valid envelope whose times are drawn: each time field set, in every shape it may take."""
    body = json.loads(json.dumps(draw(st.sampled_from(BASES))))
    body["occurred_at"] = draw(st.one_of(st.sampled_from(EDGE_TIMES), TIMES))
    if "not_before" in body.get("retry", {}):
        body["retry"]["not_before"] = draw(TIMES)
    if body["ok"] and draw(st.booleans()):
        body["verification"] = {"checked_at": draw(TIMES)}
    return body


ENVELOPES = st.one_of(near_envelopes(), from_schema(schema.ENVELOPE_SCHEMA), JSON)
COMPACT = st.one_of(from_schema(schema.COMPACT_SCHEMA), JSON)
CONTENT_TYPES = {
    "canonical": "application/json",
    "compact": 'application/json; profile="compact"',
    "mcp": 'application/json; profile="mcp"',
}


def _mcp(envelope: Any, is_error: Any) -> Any:
    return {"content": [], "structuredContent": envelope, "isError": is_error}


BODIES = st.one_of(
    st.tuples(st.just("canonical"), ENVELOPES),
    st.tuples(st.just("compact"), COMPACT),
    st.tuples(st.just("mcp"), st.builds(_mcp, ENVELOPES, st.one_of(st.booleans(), JSON))),
)


def assert_answered_without_fault(response: Any) -> None:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        assert response["Content-Type"].startswith(PROBLEM), (response.status_code, response["Content-Type"])
        problem = response.json()
        assert problem["status"] == response.status_code
        assert isinstance(problem["code"], str) and problem["code"]


@FUZZ
@given(body=BODIES)
def test_no_envelope_answers_5xx(agent, body: tuple[str, Any]) -> None:
    dialect, payload = body
    response = agent.envelope(json.dumps(payload), content_type=CONTENT_TYPES[dialect])
    assert_answered_without_fault(response)


@FUZZ
@given(envelope=timed_envelopes(), wrapped=st.booleans())
def test_no_envelope_with_odd_times_answers_5xx(agent, envelope: dict[str, Any], wrapped: bool) -> None:
    if wrapped:
        response = agent.envelope(_mcp(envelope, not envelope["ok"]), content_type=CONTENT_TYPES["mcp"])
    else:
        response = agent.envelope(envelope)
    assert_answered_without_fault(response)
    if response.status_code == 422:
        assert response.json()["code"] == "schema_invalid"


ATTEMPT_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "pattern": schema.TOOL_PATTERN},
        "input_fingerprint": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
        "input": {},
        "run_id": {"type": "string"},
        "correlation_id": {"type": "string"},
    },
    "required": ["tool", "input_fingerprint"],
}
ATTEMPTS = st.one_of(
    from_schema(ATTEMPT_SCHEMA), st.dictionaries(st.sampled_from(list(ATTEMPT_SCHEMA["properties"])), ODD), JSON
)
REFS = st.one_of(st.just("run_81/step_4"), st.text(min_size=1, max_size=250))


@FUZZ
@given(ref=REFS, body=ATTEMPTS, key=st.none() | st.text(max_size=300))
def test_no_attempt_answers_5xx(agent, ref: str, body: Any, key: str | None) -> None:
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    try:
        response = agent.post(f"/api/v1/steps/{quote(ref, safe='')}/attempts", json.dumps(body), **headers)
    except UnicodeEncodeError:  # a header the test client itself cannot send: no HTTP client could
        return
    assert_answered_without_fault(response)


INPUT_TEXT = st.one_of(st.text(max_size=30), st.sampled_from(["\u0000", "\ud800", "sk-live0123456789abcdef"]))
INPUTS = st.dictionaries(
    INPUT_TEXT,
    st.recursive(
        st.none() | st.booleans() | st.integers(min_value=-(2**60), max_value=2**60) | st.floats() | INPUT_TEXT,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(INPUT_TEXT, children, max_size=4),
        max_leaves=20,
    ),
    max_size=5,
)


def _fingerprint_or_any(value: Any) -> str:
    import hashlib

    import rfc8785

    try:
        return hashlib.sha256(rfc8785.dumps(value)).hexdigest()
    except (ValueError, TypeError, UnicodeEncodeError):
        return "0" * 64


@FUZZ
@given(value=INPUTS)
def test_no_input_with_its_own_fingerprint_answers_5xx_and_a_grant_stores_it_storable(agent, value: Any) -> None:
    from envelopes.models import Attempt

    body = {"tool": "send_email", "input_fingerprint": _fingerprint_or_any(value), "input": value}
    try:
        text = json.dumps(body, allow_nan=True)  # NaN and infinities are refused by the parser: 400
    except ValueError:
        return
    ref = f"fuzz_input_{uuid.uuid4().hex}"  # a new step each time: every valid input is granted
    response = agent.post(f"/api/v1/steps/{ref}/attempts", text)
    assert_answered_without_fault(response)
    if response.status_code == 201:
        stored = Attempt.objects.get(step__operation_ref=ref).input
        assert "\u0000" not in json.dumps(stored) and "sk-live0123456789abcdef" not in json.dumps(stored)


REPORTS = st.one_of(
    st.fixed_dictionaries(
        {"outcome": st.sampled_from(["committed", "not_found", "unavailable"]), "checked_at": TIMES},
        optional={"evidence_ref": st.text(max_size=250)},
    ),
    st.dictionaries(st.sampled_from(["outcome", "checked_at", "evidence_ref"]), ODD),
)


@FUZZ
@given(report=REPORTS)
def test_no_verification_report_answers_5xx(agent, report: Any) -> None:
    agent.envelope(unknown_outcome())
    response = agent.post(f"/api/v1/steps/{quote('run_81/step_4', safe='')}/verification", json.dumps(report))
    assert_answered_without_fault(response)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"occurred_at": "9999-12-31T23:59:59+00:00"}, "occurred_at"),
        ({"occurred_at": "1970-01-01T00:00:00Z"}, "occurred_at"),
        ({"verification": {"checked_at": "9999-12-31T23:59:59+00:00"}}, "verification.checked_at"),
    ],
)
def test_a_time_beyond_the_bounds_is_422_naming_the_field(agent, change: dict[str, Any], field: str) -> None:
    body = unknown_outcome(**change) if field == "occurred_at" else success_envelope(**change)
    response = agent.envelope(body)
    assert response.status_code == 422
    problem = response.json()
    assert problem["code"] == "schema_invalid"
    assert problem["errors"] == [{"field": field, "rule": "time_window"}]
    assert field in problem["detail"]


def test_a_not_before_more_than_a_year_ahead_is_422(agent) -> None:
    later = _format(datetime.now(UTC) + timedelta(days=400))
    body = error_envelope(
        next_action="wait_and_retry",
        retry={"directive": "after_delay", "not_before": later, "max_attempts_remaining": 2},
    )
    problem = agent.envelope(body).json()
    assert problem["errors"] == [{"field": "retry.not_before", "rule": "time_window"}]


def test_times_within_the_bounds_are_accepted(agent) -> None:
    now = datetime.now(UTC)
    body = error_envelope(
        occurred_at=_format(now - timedelta(days=3000)),
        next_action="wait_and_retry",
        retry={
            "directive": "after_delay",
            "not_before": _format(now + timedelta(days=300)),
            "max_attempts_remaining": 2,
        },
    )
    assert agent.envelope(body).status_code == 201
    skewed = unknown_outcome(operation_ref="r2", occurred_at=_format(now + timedelta(hours=20)))
    assert agent.envelope(skewed).status_code == 201


@pytest.mark.parametrize("checked_at", ["9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+01:00"])
def test_a_verification_report_out_of_bounds_is_422_naming_checked_at(agent, checked_at: str) -> None:
    agent.envelope(unknown_outcome())
    response = agent.verify("run_81/step_4", "not_found", checked_at=checked_at)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "checked_at"


# Text PostgreSQL cannot store (NUL, in text and jsonb) or UTF-8 cannot encode (a lone surrogate),
# in every place an agent's text goes: stored as U+FFFD or escaped, never a 500.
UNSTORABLE = ["a\u0000b", "\ud800", "x\udfff\u0000"]


@pytest.mark.parametrize("text", UNSTORABLE)
@pytest.mark.parametrize("where", ["agent_message", "user_message", "safe_details", "safe_details key", "rejected"])
def test_unstorable_text_in_an_envelope_is_stored_replaced(agent, text: str, where: str) -> None:
    changes: dict[str, Any] = {
        "agent_message": {"agent_message": text},
        "user_message": {"user_message": text},
        "safe_details": {"safe_details": {"field": text}},
        "safe_details key": {"safe_details": {text: "1"}},
        "rejected": {"agent_message": text, "category": "weather", text: 1},
    }[where]
    response = agent.envelope(json.dumps(error_envelope(**changes)))
    assert_answered_without_fault(response)
    assert response.status_code in (201, 422)


@pytest.mark.parametrize("text", UNSTORABLE)
def test_an_unknown_attempt_field_named_with_unstorable_text_is_422_and_replayable(agent, text: str) -> None:
    body = json.dumps({"tool": "send_email", "input_fingerprint": "a" * 64, text: 1})
    response = agent.post("/api/v1/steps/r1/attempts", body, HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 422
    assert response.json()["errors"][0]["rule"] == "additionalProperties"
    assert "\u0000" not in response.json()["errors"][0]["field"]
    replayed = agent.post("/api/v1/steps/r1/attempts", body, HTTP_IDEMPOTENCY_KEY="k-1")
    assert replayed.json() == response.json()


# --- query parameters and path segments: every GET route of the agent API -----------------------
# The routes and the parameters each view reads are tests/odd_input.py's AGENT_ROUTES (held to the
# URLconf and the code by tests/test_every_query_parameter_fuzzed.py).

QUERY_FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
VALID_SEGMENTS = {"ref": quote("run_81/step_4", safe=""), "tool": "send_email", "run_id": "run_81"}


@pytest.fixture
def listed(agent) -> None:
    """Steps to page through, a run with a skipped resource, and envelopes for the metrics."""
    for n in range(3):
        agent.envelope(error_envelope(operation_ref=f"run_81/step_{n}", run_id="run_81"))
    agent.envelope(error_envelope(operation_ref="run_81/step_4", run_id="run_81", scope="resource", resource_id="r1"))


@QUERY_FUZZ
@pytest.mark.parametrize("name", sorted(AGENT_ROUTES))
@given(data=st.data())
def test_no_query_or_path_segment_answers_5xx(agent, listed, name: str, data: st.DataObject) -> None:
    route = AGENT_ROUTES[name]
    segments = {
        key: data.draw(st.one_of(st.just(VALID_SEGMENTS[key]), odd_segment()), label=key)
        for key in VALID_SEGMENTS
        if "{" + key + "}" in route.path
    }
    query = data.draw(odd_query(route.params + API_FRAMEWORK_PARAMS), label="query")

    assert_answered_without_fault(agent.get(odd_url(route, segments, query)))


def test_each_parameter_and_segment_with_each_critical_value_answers_4xx_at_worst(agent, listed) -> None:
    faults = []
    for route in AGENT_ROUTES.values():
        segments = {key: value for key, value in VALID_SEGMENTS.items() if "{" + key + "}" in route.path}
        for url in sweep(route, segments, API_FRAMEWORK_PARAMS):
            try:
                with transaction.atomic():  # a fault rolls back to here: each URL is judged on its own
                    assert_answered_without_fault(agent.get(url))
            except Exception as fault:
                faults.append((url[:120], repr(fault)[:200]))

    assert not faults, "\n".join(map(repr, faults))


@pytest.mark.parametrize("endpoint", ["attempts", "verification"])
def test_each_critical_ref_in_a_post_answers_4xx_at_worst(agent, listed, endpoint: str) -> None:
    route = Route(f"/api/v1/steps/{{ref}}/{endpoint}", (), "agent")
    attempt = {"tool": "send_email", "input_fingerprint": "a" * 64}
    body = attempt if endpoint == "attempts" else {"outcome": "not_found", "checked_at": "2026-11-29T12:00:00Z"}
    faults = []
    for url in sweep(route, {"ref": VALID_SEGMENTS["ref"]}):
        try:
            with transaction.atomic():  # a fault rolls back to here: each URL is judged on its own
                assert_answered_without_fault(agent.post(url, json.dumps(body)))
        except Exception as fault:  # every URL is tried; the list says which failed
            faults.append((url[:120], repr(fault)[:200]))

    assert not faults, "\n".join(map(repr, faults))


@pytest.mark.parametrize("cursor", CRAFTED_CURSORS)
def test_a_crafted_cursor_is_422_naming_the_cursor(agent, listed, cursor: str) -> None:
    response = agent.get("/api/v1/steps", {"cursor": cursor})

    assert response.status_code == 422
    assert response["Content-Type"].startswith(PROBLEM)
    assert response.json()["code"] == "schema_invalid"
    assert [error["field"] for error in response.json()["errors"]] == ["cursor"]


@pytest.mark.parametrize("cursor", HARMLESS_CURSORS)
def test_a_cursor_naming_the_first_page_or_a_capped_offset_answers_200(agent, listed, cursor: str) -> None:
    assert agent.get("/api/v1/steps", {"cursor": cursor}).status_code == 200


def test_a_cursor_the_api_wrote_still_pages(agent, listed) -> None:
    first = agent.get("/api/v1/steps", {"limit": 2}).json()
    second = agent.get(first["next"]).json()
    refs = [s["operation_ref"] for s in first["results"] + second["results"]]

    assert refs == ["run_81/step_4", "run_81/step_2", "run_81/step_1", "run_81/step_0"]
    assert second["next"] is None


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/steps/run_81%00step_4", 404),
        ("/api/v1/steps/%00", 404),
        ("/api/v1/tools/send%00email/codes", 404),
        ("/api/v1/tools/%00/metrics", 404),
        ("/api/v1/runs/run%0081/skipped", 400),  # a run_id is 1..200 printable characters
    ],
)
def test_a_nul_in_a_path_segment_names_nothing(agent, listed, path: str, status: int) -> None:
    response = agent.get(path)

    assert response.status_code == status
    assert response["Content-Type"].startswith(PROBLEM)


@pytest.mark.parametrize("param", ["state", "tool", "run_id", "cursor", "limit"])
def test_a_nul_in_a_list_parameter_is_422_naming_it(agent, param: str) -> None:
    response = agent.get(f"/api/v1/steps?{param}=a%00b")

    assert response.status_code == 422
    assert {error["field"] for error in response.json()["errors"]} == {param}


# --- a NUL in each string an agent's JSON carries: a 422 naming the field, or stored without it -

NUL = "a\u0000b"
ENVELOPE_TEXT_FIELDS = [
    ("tool",),
    ("operation_ref",),
    ("correlation_id",),
    ("run_id",),
    ("code",),
    ("category",),
    ("commit_state",),
    ("next_action",),
    ("scope",),
    ("resource_id",),
    ("occurred_at",),
    ("agent_message",),
    ("user_message",),
    ("retry", "directive"),
    ("retry", "not_before"),
    ("safe_details", "field"),
]


def _stored_without_nul(*rows: Any) -> bool:
    from django.core import serializers as django_serializers

    return all("\\u0000" not in django_serializers.serialize("json", [row]) for row in rows)


@pytest.mark.parametrize("path", ENVELOPE_TEXT_FIELDS, ids=".".join)
def test_a_nul_in_an_envelope_string_is_422_naming_it_or_stored_without_it(agent, path: tuple[str, ...]) -> None:
    from envelopes.models import Envelope, Quarantine

    body = error_envelope(run_id="run_81", correlation_id="c-1", scope="resource", resource_id="r1")
    if len(path) == 2:
        body[path[0]][path[1]] = NUL
    else:
        body[path[0]] = NUL
    response = agent.envelope(json.dumps(body))

    assert_answered_without_fault(response)
    if response.status_code == 422:
        assert ".".join(path) in [error["field"] for error in response.json()["errors"]]
    else:
        assert response.status_code == 201
    assert _stored_without_nul(*Envelope.objects.all(), *Quarantine.objects.all())


@pytest.mark.parametrize("field", ["tool", "input_fingerprint", "run_id", "correlation_id", "input key", "input value"])
def test_a_nul_in_an_attempt_string_is_422_naming_it_or_stored_without_it(agent, field: str) -> None:
    from envelopes.models import Attempt
    from envelopes.proposal import input_fingerprint

    value = {"to": "a@example.com"}
    if field == "input key":
        value = {NUL: "x"}
    elif field == "input value":
        value = {"to": NUL, "nested": [{"deep": NUL}]}
    body: dict[str, Any] = {"tool": "send_email", "input_fingerprint": input_fingerprint(value), "input": value}
    if not field.startswith("input"):
        body[field] = NUL
    response = agent.post("/api/v1/steps/run_81%2Fstep_9/attempts", json.dumps(body))

    assert_answered_without_fault(response)
    if response.status_code == 422:
        named = [error["field"] for error in response.json()["errors"]]
        assert any(name == field or name.startswith("input") for name in named), named
    else:
        assert response.status_code == 201
    assert _stored_without_nul(*Attempt.objects.all())


@pytest.mark.parametrize("field", ["outcome", "checked_at", "evidence_ref"])
def test_a_nul_in_a_verification_report_is_422_naming_it(agent, field: str) -> None:
    agent.envelope(unknown_outcome())
    report = {"outcome": "not_found", "checked_at": "2026-11-29T12:00:00Z", "evidence_ref": "lookup-1", field: NUL}
    response = agent.post(f"/api/v1/steps/{quote('run_81/step_4', safe='')}/verification", json.dumps(report))

    assert response.status_code == 422
    assert [error["field"] for error in response.json()["errors"]] == [field]


def test_a_nul_in_an_idempotency_key_is_refused_not_stored(agent) -> None:
    body = {"tool": "send_email", "input_fingerprint": "a" * 64}
    response = agent.post("/api/v1/steps/r1/attempts", json.dumps(body), HTTP_IDEMPOTENCY_KEY="k\u00001")

    assert_answered_without_fault(response)
    assert response.status_code == 422
