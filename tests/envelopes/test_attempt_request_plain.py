"""The attempt gate's plain-body lane (envelopes.api._attempt_request_plain) gives exactly the
fields the DRF serializer would, or leaves the body to the serializer: it is never looser."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopes.api import AttemptRequestInput, _attempt_request_plain

FINGERPRINT = "ab" * 32


def serializer_verdict(body: Any) -> dict[str, Any] | None:
    serializer = AttemptRequestInput(data=body)
    return dict(serializer.validated_data) if serializer.is_valid() else None


@pytest.mark.parametrize(
    "body",
    [
        {"tool": "send_email", "input_fingerprint": FINGERPRINT},
        {"tool": "payments.create_invoice", "input_fingerprint": FINGERPRINT.upper(), "run_id": "run_81"},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "input": {"amount": 12, "to": ["a@b.example"]}},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "input": [], "correlation_id": "c" * 200},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "input": 0},
    ],
)
def test_a_common_body_takes_the_plain_lane_with_the_serializers_fields(body: dict[str, Any]) -> None:
    assert _attempt_request_plain(body) == serializer_verdict(body) == body


@pytest.mark.parametrize(
    "body",
    [
        {"tool": " send_email", "input_fingerprint": FINGERPRINT},  # DRF trims: valid, but not plain
        {"tool": "send_email\n", "input_fingerprint": FINGERPRINT},  # `$` would match before the newline
        {"tool": "send_email", "input_fingerprint": FINGERPRINT + "\n"},
        {"tool": "Send", "input_fingerprint": FINGERPRINT},
        {"tool": "t" * 101, "input_fingerprint": FINGERPRINT},
        {"tool": "t", "input_fingerprint": FINGERPRINT[:-1]},
        {"tool": "t", "input_fingerprint": 12},
        {"tool": 7, "input_fingerprint": FINGERPRINT},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "input": None},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "run_id": None},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "run_id": ""},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "run_id": "a\x00b"},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "run_id": "r" * 201},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "correlation_id": "\u202e"},
        {"tool": "t", "input_fingerprint": FINGERPRINT, "extra": 1},
        {"input_fingerprint": FINGERPRINT},
        ["tool"],
    ],
)
def test_anything_else_is_left_to_the_serializer(body: Any) -> None:
    assert _attempt_request_plain(body) is None


TEXT = st.one_of(
    st.text(max_size=5),
    st.sampled_from(["send_email", "a.b-c_d", " x", "x ", "x\n", "X", "r" * 200, "r" * 201, FINGERPRINT]),
    st.text(alphabet="0123456789abcdefABCDEF", min_size=63, max_size=65),
)
VALUE = st.one_of(TEXT, st.none(), st.integers(), st.booleans(), st.lists(st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["tool", "input_fingerprint", "input", "run_id", "correlation_id", "other"]),
        VALUE,
        max_size=6,
    )
)
def test_the_plain_lane_never_disagrees_with_the_serializer(body: dict[str, Any]) -> None:
    plain = _attempt_request_plain(body)
    if plain is not None:
        assert plain == serializer_verdict(body)
