"""A step created by a write is saved whole: the narrow second save of a just-inserted step
(`step_save(created=True)`) leaves no field behind, whatever the write that created it."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from accounts.models import Team
from envelopes import services
from envelopes.models import Step
from tests.conftest import error_envelope, fingerprint, unknown_outcome

pytestmark = pytest.mark.django_db


def _row(step: Step) -> dict[str, Any]:
    return {field.attname: getattr(step, field.attname) for field in Step._meta.concrete_fields}


def _ingest(team: Team, payload: dict[str, Any]) -> Step:
    return services.envelope_ingest(team=team, payload=payload, dialect="canonical", raw_body=b"{}").step


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(lambda team: _ingest(team, error_envelope()), id="error envelope"),
        pytest.param(lambda team: _ingest(team, unknown_outcome()), id="unknown outcome (held)"),
        pytest.param(
            lambda team: (
                services.attempt_request(
                    team=team, operation_ref="run_81/step_4", tool_name="send_email", fingerprint=fingerprint("x")
                ).step
            ),
            id="attempt gate",
        ),
    ],
)
def test_the_row_of_a_new_step_holds_everything_the_write_set(team: Team, create) -> None:
    step = create(team)
    saved = Step.objects.get(pk=step.pk)
    assert _row(saved) == _row(step)
    assert saved.audit_seq >= 1


def _apps() -> list[Path]:
    root = Path(__file__).resolve().parents[2]
    return [p for p in root.glob("*/") if (p / "apps.py").exists() or p.name in {"config", "sdk", "bench"}]


# A write of a Step row: its save(), a queryset's insert or update, or the SQL writer's statement.
STEP_WRITE = re.compile(
    r"\bstep\.save\(|\bStep\.objects\b.*\.(update|create|bulk_create|bulk_update|update_or_create|get_or_create)\("
    r"|\bmodelsql\.(insert|update)\(\s*step\b"
)


def _writers_of_step_rows() -> dict[str, list[int]]:
    """Every function of the apps that writes Step rows (migrations aside), with the lines."""
    root = Path(__file__).resolve().parents[2]
    found: dict[str, list[int]] = {}
    for app in _apps():
        for path in app.rglob("*.py"):
            if "migrations" in path.parts:
                continue
            source = path.read_text()
            lines = source.splitlines()
            hits = [number for number, line in enumerate(lines, 1) if STEP_WRITE.search(line)]
            if not hits:
                continue
            functions = [
                node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            for number in hits:
                # The outermost function around the line: a nested helper belongs to its writer.
                around = [f for f in functions if f.lineno <= number <= (f.end_lineno or f.lineno)]
                name = min(around, key=lambda f: f.lineno).name if around else "<module>"
                found.setdefault(f"{path.relative_to(root)}::{name}", []).append(number)
    return found


def test_every_door_applies_events_through_the_one_function() -> None:
    """STYLE.md: one way to apply an event to a step. Outside `transitions` no code asks the
    machine for a transition or copies its answer onto a step row, and one function of it,
    the plan's writer, writes Step rows: every door's change goes through `apply_event`."""
    root = Path(__file__).resolve().parents[2]
    apps = _apps()
    offenders = []
    pattern = re.compile(r"\badvance\(|\bcopy_snapshot\(|\bstep\.state\s*=[^=]")
    for app in apps:
        for path in app.rglob("*.py"):
            if "migrations" in path.parts or path.name in {"lifecycle.py", "transitions.py"}:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert apps and not offenders, offenders
    writers = _writers_of_step_rows()
    # bench/bulk.py builds measurement data past the machine, never a door.
    assert sorted(writers) == ["bench/bulk.py::steps_bulk", "envelopes/transitions.py::plan_write"], writers


def test_the_search_for_writers_of_step_rows_finds_one() -> None:
    """The check above can fail: a second writer is found."""
    assert STEP_WRITE.search("        step.save(update_fields=['due_at'])")
    assert STEP_WRITE.search("    Step.objects.filter(pk=pk).update(state='cancelled')")
    assert STEP_WRITE.search("    statements.append(modelsql.update(step))")
    assert not STEP_WRITE.search("    locked.save()")
