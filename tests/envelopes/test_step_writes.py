"""A step created by a write is saved whole: the narrow second save of a just-inserted step
(`step_save(created=True)`) leaves no field behind, whatever the write that created it."""

from __future__ import annotations

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


def test_every_door_applies_events_through_the_one_function() -> None:
    """STYLE.md: one way to apply an event to a step. Outside `transitions.apply_event` no code
    asks the machine for a transition or copies its answer onto a step row."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    apps = [p for p in root.glob("*/") if (p / "apps.py").exists() or p.name in {"config", "sdk"}]
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
