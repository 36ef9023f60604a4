"""policy.words: what a reviewer reads before saving a grant."""

from __future__ import annotations

import pytest

from policy import cel
from policy.words import grant_when_from_input, when_in_words


def test_the_prefilled_when_is_equality_on_the_scalar_fields() -> None:
    when = grant_when_from_input(
        {"customer": "c_42", "amount_cents": 1200, "express": True, "lines": [1, 2], "note": None}
    )
    assert when == 'input.amount_cents == 1200 && input.customer == "c_42" && input.express == true'


def test_the_prefilled_when_compiles_and_matches_the_input_it_came_from() -> None:
    approved = {"customer": 'c "quoted"\n', "in": "keyword", "my-key": 3, "ratio": 2.0}
    when = grant_when_from_input(approved)
    program = cel.compile_when(when)
    bindings = cel.bindings_of(
        tool="t", input=approved, has_input=True, run_id="", key="", attempt=1, code="", state="", now=_now()
    )
    assert program.evaluate(cel.activation_of(bindings)) is True
    other = approved | {"customer": "c_43"}
    assert program.evaluate(cel.activation_of(bindings | {"input": other})) is False


def test_redacted_values_are_not_pinned() -> None:
    assert grant_when_from_input({"token": "[REDACTED:key_name]", "to": "bob"}) == 'input.to == "bob"'


@pytest.mark.parametrize("approved", [None, {}, {"lines": [1]}])
def test_an_input_with_no_scalar_field_prefills_true(approved: object) -> None:
    assert grant_when_from_input(approved) == "true"  # type: ignore[arg-type]
    assert when_in_words("true") == "every call"


def test_a_when_in_words() -> None:
    words = when_in_words('has(input.amount_cents) && input.amount_cents > 50000 && input.customer == "c_42"')
    assert words == (
        "the input has amount_cents and the input's amount_cents is more than 50000 "
        'and the input\'s customer is "c_42"'
    )


def test_variables_and_lists_in_words() -> None:
    assert when_in_words('tool in ["drop_table", "truncate"] || !has_input') == (
        'the tool is one of ["drop_table", "truncate"] or not the agent sent its input'
    )


def _now():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime(2026, 12, 2, tzinfo=UTC)
