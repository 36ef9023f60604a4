"""A name with a trailing newline is not a name: Python's `$` matches before a final "\\n",
so every anchored pattern of the contract must refuse it, on ingest and at the gate."""

from __future__ import annotations

import pytest

from envelopes.models import Step, Tool
from tests.conftest import error_envelope, fingerprint

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool", "send_email\n"),
        ("code", "INVALID_RECIPIENT_ADDRESS\n"),
        ("occurred_at", "2026-03-01T10:00:00Z\n"),
    ],
)
def test_ingest_refuses_a_trailing_newline_naming_the_field(agent, field: str, value: str) -> None:
    response = agent.envelope(error_envelope(**{field: value}))
    assert response.status_code == 422, response.content
    assert field in {error["field"] for error in response.json()["errors"]}
    assert not Tool.objects.filter(name__endswith="\n").exists()


@pytest.mark.parametrize("tool", ["send_email\n", " send_email", "send_email "])
def test_the_gate_refuses_a_tool_name_with_surrounding_whitespace(agent, tool: str) -> None:
    response = agent.attempt("ref-nl", tool=tool, fingerprint=fingerprint("x"))
    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["field"] == "tool"
    assert not Step.objects.exists()


def test_the_gate_refuses_a_fingerprint_with_a_trailing_newline(agent) -> None:
    response = agent.attempt("ref-nl", tool="send_email", fingerprint=fingerprint("x") + "\n")
    assert response.status_code == 422, response.content
    assert response.json()["errors"][0]["field"] == "input_fingerprint"
