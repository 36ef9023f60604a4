"""policy.cel: a rule's `when` is checked when it is saved, and evaluated within limits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from policy import cel
from policy.errors import WhenInvalid

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def facts(**overrides: object) -> dict[str, object]:
    bindings = cel.bindings_of(
        tool="refund",
        input={"amount_cents": 60000, "to": "bob@example.com", "items": [1, 2, 3]},
        has_input=True,
        run_id="run_1",
        key="agent-1",
        attempt=1,
        code="",
        state="in_progress",
        now=NOW,
    )
    return bindings | overrides


def evaluate(expression: str, **overrides: object) -> bool:
    return cel.compile_when(expression).evaluate(cel.activation_of(facts(**overrides)))


# --- the contract's examples (§11) ------------------------------------------------------------


def test_the_amount_example_matches_over_the_threshold_only() -> None:
    expression = "has(input.amount_cents) && input.amount_cents > 50000"
    assert evaluate(expression) is True
    assert evaluate(expression, input={"amount_cents": 50000}) is False
    assert evaluate(expression, input={"currency": "EUR"}) is False


def test_the_tool_list_example() -> None:
    assert evaluate('tool in ["drop_table"]', tool="drop_table") is True
    assert evaluate('tool in ["drop_table"]') is False


def test_the_address_example() -> None:
    assert evaluate('!input.to.endsWith("@example.com")') is False
    assert evaluate('!input.to.endsWith("@example.com")', input={"to": "eve@evil.test"}) is True


def test_every_variable_is_known_with_its_type() -> None:
    expression = (
        'tool == "refund" && has_input && run_id == "run_1" && key == "agent-1" && attempt == 1 '
        '&& code == "" && state == "in_progress" && now > timestamp("2026-01-01T00:00:00Z")'
    )
    assert evaluate(expression) is True


def test_a_missing_field_fails_on_the_call() -> None:
    program = cel.compile_when("input.amount_cents > 5")
    with pytest.raises(cel.EvaluationError):
        program.evaluate(cel.activation_of(facts(input={"currency": "EUR"})))


def test_a_null_input_fails_on_the_call() -> None:
    program = cel.compile_when("input.amount_cents > 5")
    with pytest.raises(cel.EvaluationError):
        program.evaluate(cel.activation_of(facts(input=None, has_input=False)))


def test_a_wrong_type_fails_on_the_call() -> None:
    program = cel.compile_when("input.to > 5")
    with pytest.raises(cel.EvaluationError):
        program.evaluate(cel.activation_of(facts()))


# --- refused at save time -------------------------------------------------------------------


def test_a_syntax_error_names_its_position() -> None:
    with pytest.raises(WhenInvalid) as refused:
        cel.compile_when("input.amount_cents > ")
    assert refused.value.position is not None
    assert 0 <= refused.value.position <= len("input.amount_cents > ")
    assert refused.value.reason


def test_an_unknown_variable_is_refused_with_its_position() -> None:
    with pytest.raises(WhenInvalid) as refused:
        cel.compile_when('tool == "x" && amount > 5')
    assert refused.value.position == len('tool == "x" && ')
    assert "amount" in refused.value.reason


def test_a_type_error_is_refused() -> None:
    with pytest.raises(WhenInvalid) as refused:
        cel.compile_when('attempt > "three"')
    assert refused.value.position is not None
    assert refused.value.reason


def test_an_expression_that_is_not_bool_is_refused() -> None:
    with pytest.raises(WhenInvalid) as refused:
        cel.compile_when("attempt + 1")
    assert "bool" in refused.value.reason


def test_an_expression_over_2_kib_is_refused_naming_the_limit() -> None:
    expression = " || ".join(f"attempt == {n}" for n in range(200))
    assert len(expression.encode()) > 2048
    with pytest.raises(WhenInvalid) as refused:
        cel.compile_when(expression)
    assert "2 KiB" in refused.value.reason


def test_an_expression_of_exactly_2_kib_is_accepted() -> None:
    expression = "attempt == 1" + " " * (2048 - len("attempt == 1"))
    assert cel.compile_when(expression).text == expression


def test_nested_macros_are_refused_as_too_costly() -> None:
    with pytest.raises(WhenInvalid) as refused:
        cel.compile_when("input.items.exists(a, input.items.exists(b, a == b))")
    assert "nests 2 macros" in refused.value.reason


def test_one_macro_over_the_input_is_allowed() -> None:
    assert evaluate("input.items.exists(i, i == 2)") is True


def test_a_long_body_inside_a_macro_is_refused_by_its_cost() -> None:
    body = " && ".join(f"i != {n}" for n in range(40))
    with pytest.raises(WhenInvalid) as refused:
        cel.compile_when(f"input.items.all(i, {body})")
    assert "cost" in refused.value.reason


def test_a_macro_name_inside_a_string_costs_nothing_more() -> None:
    assert evaluate('input.to != ".exists(x, .all(y, y))"') is True


def test_an_empty_expression_is_refused() -> None:
    with pytest.raises(WhenInvalid):
        cel.compile_when("   ")


def test_a_program_is_compiled_once_per_text() -> None:
    assert cel.compile_when("attempt > 2") is cel.compile_when("attempt > 2")
