"""Rules' and grants' `when` (contract §11): CEL through `cel-expr-python`, the CEL team's own
Python runtime (cel-cpp's parser, type checker and evaluator), chosen in the README's decisions.

An expression is compiled once per text per process, against the declared variables, so that a
syntax or type error, an unknown variable or a result that is not bool is refused when the rule
is saved, with its position. Evaluation is bounded before it runs: at most 2 KiB of text, at
most `MAX_NESTING` levels of macros (`all`, `exists`, `map`, …) and an estimated cost (each
node weighed by the largest list or map a stored input can hold, per level of macro around it)
of at most `MAX_COST`; the stored input is itself at most 32 KiB (contract §4)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

MAX_BYTES = 2048
# A stored input is at most 32 KiB of canonical JSON: no list or map in it has more elements
# than that many two-byte items ("0,").
MAX_ELEMENTS = 16384
MAX_NESTING = 1
MAX_COST = 1_000_000

VARIABLES = ("tool", "input", "has_input", "run_id", "key", "attempt", "code", "state", "now")
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class EvaluationError(Exception):
    """A `when` that failed on a call (a missing field, a wrong type): the caller fails closed."""


@dataclass(frozen=True)
class CompiledWhen:
    """A checked `when`, ready to evaluate against a call's facts (`bindings`)."""

    text: str
    cost: int
    _program: Any = field(repr=False, compare=False)

    def evaluate(self, activation: Any) -> bool:
        """The value for one call's `activation` (`activation_of`); EvaluationError when it fails."""
        try:
            result = self._program.eval(activation).value()
        except Exception as error:  # the library's failures are one kind to the caller
            raise EvaluationError(str(error)) from None
        if isinstance(result, bool):
            return result
        raise EvaluationError(str(result) if result is not None else "the expression gave no bool")


@functools.cache
def _env() -> Any:
    from cel_expr_python import cel

    t = cel.Type
    variables = {
        "tool": t.STRING,
        "input": t.DYN,
        "has_input": t.BOOL,
        "run_id": t.STRING,
        "key": t.STRING,
        "attempt": t.INT,
        "code": t.STRING,
        "state": t.STRING,
        "now": t.TIMESTAMP,
    }
    return cel.NewEnv(variables=variables)


def activation_of(bindings: dict[str, Any]) -> Any:
    """The evaluation context of one call, built once and shared by every `when` evaluated on it."""
    return _env().Activation(bindings)


def bindings_of(
    *,
    tool: str,
    input: Any,
    has_input: bool,
    run_id: str,
    key: str,
    attempt: int,
    code: str,
    state: str,
    now: datetime,
) -> dict[str, Any]:
    return {
        "tool": tool,
        "input": input,
        "has_input": has_input,
        "run_id": run_id,
        "key": key,
        "attempt": attempt,
        "code": code,
        "state": state,
        "now": now,
    }


@functools.lru_cache(maxsize=4096)
def compile_when(expression: str) -> CompiledWhen:
    """The checked program of `expression`, or WhenInvalid naming the position and the reason."""
    from .errors import WhenInvalid

    if not isinstance(expression, str) or not expression.strip():
        raise WhenInvalid(None, "The expression is empty.")
    size = len(expression.encode())
    if size > MAX_BYTES:
        raise WhenInvalid(None, f"The expression is {size} bytes; at most {MAX_BYTES} (2 KiB) are allowed.")
    nesting, cost = _static_cost(expression)
    if nesting > MAX_NESTING:
        raise WhenInvalid(
            None,
            f"The expression nests {nesting} macros (all, exists, exists_one, map, filter); at most "
            f"{MAX_NESTING} level is allowed: its cost would grow with the input's size to that power.",
        )
    if cost > MAX_COST:
        raise WhenInvalid(
            None,
            f"The expression's estimated cost is {cost}, over the limit of {MAX_COST}: "
            "fewer operations inside its macro would fit.",
        )
    try:
        program = _env().compile(expression)
    except Exception as error:  # the library raises one exception type for every compile error
        position, reason = _error_position(expression, str(error))
        raise WhenInvalid(position, reason) from None
    from cel_expr_python import cel

    result_type = program.return_type()
    if result_type != cel.Type.BOOL:
        raise WhenInvalid(0, f"The expression yields {result_type.name()}, not bool.")
    return CompiledWhen(text=expression, cost=cost, _program=program)


# The longest text a combined program may have (cel-cpp's parser refuses past 100,000 code points).
MAX_COMBINED = 60_000


@dataclass(frozen=True)
class CompiledAll:
    """Several checked `when`s as one program that yields the list of their values: one call
    into the library for a rule set, whose fixed cost per call is most of a small rule's."""

    count: int
    _program: Any = field(repr=False, compare=False)

    def evaluate(self, activation: Any) -> list[bool] | None:
        """Every value, or None when one of them failed (the caller then evaluates them one by
        one, to know which)."""
        try:
            values = self._program.eval(activation).plain_value()
        except Exception:
            return None
        if not isinstance(values, list) or len(values) != self.count or not all(isinstance(v, bool) for v in values):
            return None
        return values


@functools.lru_cache(maxsize=1024)
def compile_all(expressions: tuple[str, ...]) -> CompiledAll | None:
    """One program for `expressions` (each already valid: `compile_when`), kept per process by
    the tuple; None when they do not make one (too long together)."""
    text = "[" + ", ".join(f"({expression})" for expression in expressions) + "]"
    if len(text) > MAX_COMBINED:
        return None
    try:
        return CompiledAll(count=len(expressions), _program=_env().compile(text))
    except Exception:  # one of them is invalid: each is evaluated (and fails) on its own
        return None


_ERROR_AT = re.compile(r"<input>:(\d+):(\d+): (.+)")


def _error_position(expression: str, message: str) -> tuple[int | None, str]:
    """The 0-based offset and the reason of the library's first error ("ERROR: <input>:L:C:
    reason" followed by a caret line)."""
    found = _ERROR_AT.search(message)
    if found is None:
        return None, message.strip().splitlines()[0] if message.strip() else "The expression does not compile."
    line, column, reason = int(found.group(1)), int(found.group(2)), found.group(3).strip()
    lines = expression.split("\n")
    offset = sum(len(text) + 1 for text in lines[: line - 1]) + max(0, column - 1)
    return min(offset, len(expression)), reason


_TOKEN = re.compile(
    r"""(?P<str>[rRbB]{0,2}(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))"""
    r"""|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<num>\d[\w.]*)|(?P<space>\s+)|(?P<op>\S)""",
    re.DOTALL,
)


def _static_cost(expression: str) -> tuple[int, int]:
    """(deepest macro nesting, estimated cost): every token costs MAX_ELEMENTS to the power of
    the macros around it, as one iteration of each runs it once per element."""
    depth_stack: list[bool] = []  # per open parenthesis: whether it opened a macro's arguments
    depth = deepest = cost = 0
    previous: list[str] = []
    for match in _TOKEN.finditer(expression):
        kind, text = match.lastgroup, match.group()
        if kind == "space":
            continue
        cost += MAX_ELEMENTS**depth
        if text == "(":
            is_macro = len(previous) >= 2 and previous[-2] == "." and previous[-1] in _MACROS
            depth_stack.append(is_macro)
            if is_macro:
                depth += 1
                deepest = max(deepest, depth)
        elif text == ")" and depth_stack and depth_stack.pop():
            depth -= 1
        previous = [*previous[-1:], text]
    return deepest, cost
