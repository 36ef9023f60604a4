"""The CEL libraries on the package lists, side by side (issue 25 point 2): whether each gives
§11's examples their values, refuses at compile time what §11 refuses (a syntax or type error,
an unknown variable, a result that is not bool), fails on a missing field, and what one
evaluation costs (in-process, one thread, the best of 5 rounds).

    python bench/cel_compare.py            # every library importable here
    python bench/cel_compare.py -n 20000   # evaluations per round

Each library is imported only if installed; figures go to bench/README.md."""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
INPUT = {"amount_cents": 60000, "to": "bob@example.com", "customer": "c_42", "lines": [1, 2, 3]}
BINDINGS = {
    "tool": "refund",
    "input": INPUT,
    "has_input": True,
    "run_id": "run_1",
    "key": "agent",
    "attempt": 1,
    "code": "",
    "state": "in_progress",
    "now": NOW,
}
VALUES = [  # (expression, input, expected)
    ("has(input.amount_cents) && input.amount_cents > 50000", INPUT, True),
    ("has(input.amount_cents) && input.amount_cents > 50000", {"currency": "EUR"}, False),
    ('tool in ["drop_table"]', INPUT, False),
    ('!input.to.endsWith("@example.com")', INPUT, False),
    ('!input.to.endsWith("@example.com")', {"to": "eve@evil.test"}, True),
    ('now > timestamp("2026-01-01T00:00:00Z") && attempt == 1', INPUT, True),
    ("input.lines.exists(l, l == 3)", INPUT, True),
    ("input.amount_cents > 5", {"currency": "EUR"}, "error"),  # missing field: fails closed
    ("input.amount_cents > 5", None, "error"),  # no input
]
REFUSED = [  # compile-time refusals §11 asks for
    ("syntax", "input.amount_cents > "),
    ("unknown variable", "amount > 5"),
    ("type", 'attempt > "three"'),
    ("not bool", "attempt + 1"),
]
TIMED = [
    "has(input.amount_cents) && input.amount_cents > 50000",
    'input.customer == "c_42" && input.amount_cents <= 100000',
    'tool in ["drop_table", "truncate"]',
]


class Library:
    name = ""

    def compile(self, text: str) -> Any:
        raise NotImplementedError

    def context(self, bindings: dict[str, Any]) -> Any:
        return bindings

    def run(self, program: Any, context: Any) -> Any:
        raise NotImplementedError


class CelExprPython(Library):
    name = "cel-expr-python"

    def __init__(self) -> None:
        from cel_expr_python import cel

        self.cel = cel
        t = cel.Type
        self.env = cel.NewEnv(
            variables={
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
        )

    def compile(self, text: str) -> Any:
        program = self.env.compile(text)
        if program.return_type() != self.cel.Type.BOOL:
            raise TypeError(f"yields {program.return_type().name()}")
        return program

    def context(self, bindings: dict[str, Any]) -> Any:
        return self.env.Activation(bindings)

    def run(self, program: Any, context: Any) -> Any:
        value = program.eval(context).value()
        if not isinstance(value, bool):
            raise RuntimeError(str(value))
        return value


class CommonExpressionLanguage(Library):
    name = "common-expression-language"
    known = frozenset(BINDINGS)

    def __init__(self) -> None:
        import cel

        self.cel = cel

    def compile(self, text: str) -> Any:
        program = self.cel.compile(text)
        # No checker: unknown names are found from the program's references (macro variables
        # included, so `l` in `lines.exists(l, ...)` would need telling apart).
        unknown = set(program.variables()) - self.known
        if unknown:
            raise NameError(f"unknown {sorted(unknown)}")
        return program

    def context(self, bindings: dict[str, Any]) -> Any:
        return self.cel.Context(variables=bindings)

    def run(self, program: Any, context: Any) -> Any:
        value = program.execute(context)
        if not isinstance(value, bool):
            raise RuntimeError(f"not bool: {value!r}")
        return value


class CelPython(Library):
    name = "cel-python"

    def __init__(self) -> None:
        import celpy
        from celpy import celtypes

        self.celpy, self.celtypes = celpy, celtypes
        self.env = celpy.Environment(
            annotations={
                "tool": celtypes.StringType,
                "input": celtypes.MapType,
                "has_input": celtypes.BoolType,
                "run_id": celtypes.StringType,
                "key": celtypes.StringType,
                "attempt": celtypes.IntType,
                "code": celtypes.StringType,
                "state": celtypes.StringType,
                "now": celtypes.TimestampType,
            }
        )

    def compile(self, text: str) -> Any:
        return self.env.program(self.env.compile(text))

    def context(self, bindings: dict[str, Any]) -> Any:
        from celpy import json_to_cel

        activation = {k: json_to_cel(v) for k, v in bindings.items() if k != "now"}
        activation["now"] = self.celtypes.TimestampType(bindings["now"])
        return activation

    def run(self, program: Any, context: Any) -> Any:
        value = program.evaluate(context)
        if isinstance(value, Exception) or not isinstance(value, self.celtypes.BoolType | bool):
            raise RuntimeError(str(value))
        return bool(value)


def outcome(library: Library, text: str, input: Any) -> Any:
    try:
        program = library.compile(text)
        return library.run(program, library.context(BINDINGS | {"input": input, "has_input": input is not None}))
    except Exception:
        return "error"


def best_of(rounds: int, count: int, work: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(count):
            work()
        best = min(best, (time.perf_counter() - started) / count)
    return best


def gate_pass(library: Library, programs: list[Any]) -> None:
    context = library.context(BINDINGS)
    for program in programs:
        library.run(program, context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5000, help="evaluations per round")
    count = parser.parse_args().n
    libraries: list[Library] = []
    for kind in (CelExprPython, CommonExpressionLanguage, CelPython):
        try:
            libraries.append(kind())
        except ImportError as missing:
            print(f"{kind.name}: not installed ({missing})")
    for library in libraries:
        right = sum(outcome(library, text, input) == expected for text, input, expected in VALUES)
        wrong = [(text, input) for text, input, expected in VALUES if outcome(library, text, input) != expected]
        refused = []
        for what, text in REFUSED:
            try:
                library.compile(text)
            except Exception:
                refused.append(what)
        programs = [library.compile(text) for text in TIMED]
        context = library.context(BINDINGS)
        one = best_of(5, count, functools.partial(library.run, programs[0], context))
        gate = best_of(5, count // 50 or 1, functools.partial(gate_pass, library, programs * 17))
        compile_cost = best_of(3, 200, functools.partial(library.compile, TIMED[1]))
        print(f"== {library.name}")
        print(f"   values right: {right}/{len(VALUES)}" + (f"; wrong: {wrong}" if wrong else ""))
        print(f"   refused at compile time: {', '.join(refused) or 'none'} (of {len(REFUSED)})")
        print(f"   one evaluation, shared context: {one * 1e6:.2f} µs")
        print(f"   51 rules on one call (the context built once): {gate * 1e6:.1f} µs")
        print(f"   one compile: {compile_cost * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
