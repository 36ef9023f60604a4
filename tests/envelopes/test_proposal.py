"""The proposed input's pure functions (envelopes/proposal.py): canonical form and fingerprint
over the corpus the SDK shares, the checks, the redaction for storage, the diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envelopes.errors import FingerprintMismatch, InputInvalid
from envelopes.proposal import (
    INPUT_MAX_BYTES,
    INPUT_MAX_DEPTH,
    Change,
    input_accept,
    input_canonical,
    input_check,
    input_diff,
    input_fingerprint,
    input_redact,
    input_secret_check,
)

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "jcs_corpus.json").read_text("utf-8"))


@pytest.mark.parametrize("case", CORPUS, ids=[case["name"] for case in CORPUS])
def test_the_server_computes_the_corpus_canonical_form_and_fingerprint(case: dict[str, Any]) -> None:
    assert input_canonical(case["input"]) == case["canonical"].encode("utf-8")
    assert input_fingerprint(case["input"]) == case["sha256"]


def test_the_corpus_covers_what_differs_between_serialisers() -> None:
    names = " ".join(case["name"] for case in CORPUS).lower()
    canonicals = " ".join(case["canonical"] for case in CORPUS)
    assert "1e+21" in canonicals and "0.1" in canonicals
    assert "astral" in names and "empty object" in names


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ([1, 2], "type"),
        ("text", "type"),
        (None, "type"),
        (nested(INPUT_MAX_DEPTH + 1), "max_depth"),
        ({"a": [[[]]] * 2, **nested(INPUT_MAX_DEPTH + 1)}, "max_depth"),
        ({"blob": "x" * INPUT_MAX_BYTES}, "max_bytes"),
        ({"n": 2**60}, "canonical"),
        ({"n": float("nan")}, "canonical"),
        ({"s": "\ud800"}, "canonical"),
    ],
)
def test_it_refuses_an_input_naming_the_field_and_rule(value: Any, rule: str) -> None:
    with pytest.raises(InputInvalid) as refused:
        input_check(value, field="input")
    assert (refused.value.field, refused.value.rule) == ("input", rule)
    assert refused.value.extra["errors"] == [{"field": "input", "rule": rule}]


def test_it_accepts_the_limits_themselves() -> None:
    input_check(nested(INPUT_MAX_DEPTH))
    filler = "x" * (INPUT_MAX_BYTES - len(b'{"blob":""}'))
    assert len(input_canonical({"blob": filler})) == INPUT_MAX_BYTES
    input_check({"blob": filler})


def test_accepting_an_input_checks_its_fingerprint_and_redacts_it() -> None:
    value = {"amount": 120, "api_key": "plain", "note": "use sk-live-4eC39HqLyjWDarjtT1zdp7dc"}
    accepted = input_accept(value, fingerprint=input_fingerprint(value).upper())
    assert accepted.fingerprint == input_fingerprint(value)
    assert accepted.redacted
    assert accepted.stored == {"amount": 120, "api_key": "[REDACTED:key_name]", "note": "use [REDACTED:api_key]"}
    with pytest.raises(FingerprintMismatch) as mismatch:
        input_accept(value, fingerprint=input_fingerprint({"amount": 121}))
    assert mismatch.value.extra["errors"] == [{"field": "input_fingerprint", "rule": "matches_input"}]


@pytest.mark.parametrize(
    "value",
    [
        {"customer": {"auth_token": "abc"}},
        {"Authorization": "Bearer x"},
        {"items": [{"X-Api-Key": "1"}]},
        {"note": "postgres://admin:pw@db.internal:5432/app"},
        {"payload": json.dumps({"password": "hunter2!"})},
        {"list": ["ok", ["-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----"]]},
    ],
)
def test_credentials_anywhere_are_redacted_and_an_edit_holding_one_is_refused(value: dict[str, Any]) -> None:
    stored, redacted = input_redact(value)
    assert redacted and "[REDACTED:" in json.dumps(stored)
    with pytest.raises(InputInvalid) as refused:
        input_secret_check(value)
    assert refused.value.rule == "no_secret"


def test_an_ordinary_input_is_stored_as_sent() -> None:
    value = {"amount": 120.5, "customer": "c_1", "tokens_used": 12, "items": [{"sku": "A-1", "qty": 2}]}
    assert input_redact(value) == (value, False)
    input_secret_check(value)


def test_an_edit_with_an_unstorable_character_is_refused() -> None:
    with pytest.raises(InputInvalid) as refused:
        input_secret_check({"note": "a\x00b"})
    assert refused.value.rule == "storable"


def test_the_diff_lists_paths_added_removed_and_changed_in_document_order() -> None:
    old = {"amount": 9000, "customer": "c_1", "items": [{"sku": "A"}, {"sku": "B"}], "a/b": 1, "flag": True}
    new = {"amount": 120, "customer": "c_1", "items": [{"sku": "A", "qty": 1}], "a/b": 1, "flag": 1, "memo": "x"}
    assert input_diff(old, new) == [
        Change("/amount", "changed", old=9000, new=120),
        Change("/flag", "changed", old=True, new=1),
        Change("/items/0/qty", "added", new=1),
        Change("/items/1", "removed", old={"sku": "B"}),
        Change("/memo", "added", new="x"),
    ]


def test_the_diff_sees_a_type_change_once_and_equal_numbers_as_equal() -> None:
    assert input_diff({"a": {"b": 1}, "n": 1}, {"a": "b", "n": 1.0}) == [Change("/a", "changed", old={"b": 1}, new="b")]
    assert input_diff(None, {"a": 1}) == [Change("/a", "added", new=1)]
    assert input_diff({"a": 1}, {"a": 1}) == []
