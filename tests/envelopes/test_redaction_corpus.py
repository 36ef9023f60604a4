"""The redaction corpus (tests/fixtures/redaction_corpus.jsonl, issue 23): every sample through the
function its door uses at ingest (`schema.parse_envelope` for messages and safe_details, the
attempt gate's `input_accept` for proposed inputs), and a few through the real API."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envelopes import schema
from envelopes.models import Attempt, Envelope
from envelopes.proposal import input_accept, input_fingerprint
from envelopes.redaction import KINDS, redact_json
from tests.conftest import error_envelope

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SPLIT = "¦"  # written inside each secret in the file (make_redaction_corpus.py says why)


def _joined(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(SPLIT, "")
    if isinstance(value, dict):
        return {_joined(k): _joined(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_joined(v) for v in value]
    return value


RAW = (FIXTURES / "redaction_corpus.jsonl").read_text("utf-8")
CORPUS = [_joined(json.loads(line)) for line in RAW.splitlines()]
BY_ID = {sample["id"]: sample for sample in CORPUS}


def _ids(where: str) -> list[str]:
    return [sample["id"] for sample in CORPUS if sample["where"] == where]


def _everything(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _check(sample: dict[str, Any], output: Any, flagged: bool, kinds: tuple[str, ...]) -> None:
    expect = sample["expect"]
    shown = output if isinstance(output, str) else _everything(output)
    for secret in expect["gone"]:
        assert secret not in shown
    for text in expect["kept"]:
        assert text in shown
    assert output == expect["output"]
    assert list(kinds) == expect["kinds"]
    assert flagged is bool(expect["kinds"])


def _parsed(**fields: Any) -> schema.ParsedEnvelope:
    return schema.parse_envelope(
        error_envelope(**fields), dialect="canonical", context=schema.ToolContext(), received_at=datetime.now(UTC)
    )


def test_the_corpus_is_large_and_covers_every_door() -> None:
    counts = Counter(sample["where"] for sample in CORPUS)
    assert len(CORPUS) >= 200
    assert counts["message"] >= 100 and counts["details"] >= 50 and counts["input"] >= 40
    assert counts["json_string"] >= 15
    ordinary = [sample for sample in CORPUS if not sample["expect"]["kinds"]]
    assert len(ordinary) >= 100
    assert {kind for sample in CORPUS for kind in sample["expect"]["kinds"]} == set(KINDS)
    assert len(BY_ID) == len(CORPUS)


def test_the_corpus_file_is_what_its_generator_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_redaction_corpus", FIXTURES / "make_redaction_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write(tmp_path / "corpus.jsonl")
    assert (tmp_path / "corpus.jsonl").read_text("utf-8") == RAW


def test_no_line_of_the_file_holds_a_whole_secret() -> None:
    """Each secret is written cut in the file, so that secret scanners pass it by."""
    for line in RAW.splitlines():
        for secret in json.loads(line)["expect"]["gone"]:
            assert SPLIT in secret
            assert secret.replace(SPLIT, "") not in line


@pytest.mark.parametrize("sample_id", _ids("message") + _ids("json_string"))
def test_a_message_is_stored_as_the_corpus_says(sample_id: str) -> None:
    sample = BY_ID[sample_id]
    parsed = _parsed(agent_message=sample["value"])
    _check(sample, parsed.agent_message, "redacted" in parsed.flags, redact_json(sample["value"])[1])
    for secret in sample["expect"]["gone"]:
        assert secret not in repr(parsed)


@pytest.mark.parametrize("sample_id", _ids("details"))
def test_a_safe_details_value_is_stored_as_the_corpus_says(sample_id: str) -> None:
    sample = BY_ID[sample_id]
    parsed = _parsed(safe_details={"field": "recipient_email", "suggestion": sample["value"]})
    assert parsed.safe_details["field"] == "recipient_email"
    _check(sample, parsed.safe_details["suggestion"], "redacted" in parsed.flags, redact_json(sample["value"])[1])


@pytest.mark.parametrize("sample_id", _ids("input"))
def test_a_proposed_input_is_stored_as_the_corpus_says(sample_id: str) -> None:
    sample = BY_ID[sample_id]
    value = sample["value"]
    accepted = input_accept(value, fingerprint=input_fingerprint(value))
    assert accepted.fingerprint == input_fingerprint(value)  # of what was sent, not of what is kept
    _check(sample, accepted.stored, accepted.redacted, redact_json(value, credential_keys=True)[1])


# --- through the API -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_ingest_api_stores_and_answers_what_the_corpus_says(agent) -> None:
    secret = BY_ID["message/holdpoint_reviewer_token/0"]
    details = BY_ID["details/teams_webhook"]
    status = BY_ID["ordinary/details/0"]  # "password: required"
    assert status["value"] == "password: required"
    response = agent.envelope(
        error_envelope(
            agent_message=secret["value"],
            safe_details={"suggestion": details["value"], "constraint": status["value"]},
        )
    )
    assert response.status_code == 201, response.content
    assert "redacted" in response.json()["flags"]
    answer = response.content.decode()
    envelope = Envelope.objects.get()
    assert envelope.agent_message == secret["expect"]["output"]
    assert envelope.safe_details == {"suggestion": details["expect"]["output"], "constraint": "password: required"}
    for gone in secret["expect"]["gone"] + details["expect"]["gone"]:
        assert gone not in answer
        assert gone not in _everything(list(Envelope.objects.values()))
    last = agent.step(error_envelope()["operation_ref"]).json()["last_envelope"]
    assert last["safe_details"] == envelope.safe_details


@pytest.mark.django_db
def test_the_attempt_gate_stores_and_shows_the_input_the_corpus_says(agent) -> None:
    credential = BY_ID["input/key/bearer"]
    nested = BY_ID["input/nested/holdpoint_api_key"]
    ordinary = BY_ID["ordinary/input/2"]  # ARNs
    value = {"call": credential["value"], "deploy": nested["value"], "iam": ordinary["value"]}
    expected = {"call": credential["expect"]["output"], "deploy": nested["expect"]["output"], "iam": ordinary["value"]}
    response = agent.attempt("run_23/charge_1", tool="charge_card", fingerprint=input_fingerprint(value), input=value)
    assert response.status_code == 201, response.content
    proposal = response.json()["step"]["proposal"]
    assert proposal["input"] == expected
    assert proposal["input_redacted"] is True
    assert proposal["input_fingerprint"] == input_fingerprint(value)
    assert Attempt.objects.get().input == expected
    for gone in credential["expect"]["gone"] + nested["expect"]["gone"]:
        assert gone not in response.content.decode()
        assert gone not in _everything(list(Attempt.objects.values()))
    assert agent.step("run_23/charge_1").json()["proposal"]["input"] == expected
