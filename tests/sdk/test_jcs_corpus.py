"""The SDK's input fingerprint is RFC 8785 (JCS): it agrees with the shared corpus, whose
expected forms come from the RFC's own examples (tests/fixtures/make_jcs_corpus.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from holdpoint_sdk import canonical_json, input_fingerprint

CORPUS: list[dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parent.parent / "fixtures" / "jcs_corpus.json").read_text(encoding="utf-8")
)


def test_the_corpus_covers_the_cases_that_differ_between_json_serialisers() -> None:
    names = " ".join(case["name"] for case in CORPUS)
    for needed in ("1e21", "0.1", "minus zero", "astral", "non-ASCII", "nested arrays", "empty object", "escapes"):
        assert needed in names
    assert all(set(case) >= {"name", "input", "sha256"} for case in CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[case["name"] for case in CORPUS])
def test_the_sdk_fingerprint_agrees_with_the_corpus(case: dict[str, Any]) -> None:
    assert canonical_json(case["input"]).decode("utf-8") == case["canonical"]
    assert input_fingerprint(case["input"]) == case["sha256"]
    assert case["sha256"] == hashlib.sha256(case["canonical"].encode("utf-8")).hexdigest()


def test_keys_sort_by_utf16_code_units_not_by_code_points() -> None:
    # U+1F600 is a surrogate pair (D83D DE00) in UTF-16, so it sorts before U+FB33; a
    # serialiser that sorts by code points (json.dumps(sort_keys=True)) puts it after.
    assert canonical_json({"\ufb33": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ufb33":1}'.encode()


def test_numbers_print_as_ecmascript_does() -> None:
    assert canonical_json([1e21, 1e20, 0.1, -0.0, 1250.0, 5e-324]) == b"[1e+21,100000000000000000000,0.1,0,1250,5e-324]"


def test_integers_beyond_double_precision_are_refused() -> None:
    with pytest.raises(ValueError):
        input_fingerprint({"id": 2**53 + 1})
