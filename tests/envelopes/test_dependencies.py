"""Dependencies point one way: the core (`envelopes`) imports no app above it (issue 11, point 7).

The step shape reads a step's decisions through the relation the reviewer app declares on Step
(`presenters.decisions_prefetch`), not by importing that app."""

from __future__ import annotations

import ast
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def project_apps() -> set[str]:
    return {name.split(".")[0] for name in settings.INSTALLED_APPS if (ROOT / name.split(".")[0]).is_dir()}


def imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
            "import_module",
            "__import__",
        ):
            names += [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return names


def test_the_project_has_apps_above_the_core() -> None:
    assert {"approvals", "webhooks", "notifications", "reviewers", "dashboard"} <= project_apps()


def app_imports(app: str) -> set[str]:
    """The project apps that `app`'s modules import (migrations aside)."""
    return {
        name.split(".")[0]
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
        for name in imported_modules(path)
    } & project_apps()


def test_no_module_of_the_core_imports_an_app_above_it() -> None:
    # Above the core: every app that builds on it. Infrastructure the core uses (the throttle in
    # `limits`) imports no project app and sits below.
    above = {app for app in project_apps() - {"envelopes"} if app_imports(app) - {app}}
    assert {"approvals", "webhooks", "notifications", "reviewers"} <= above
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / "envelopes").rglob("*.py")
        if "migrations" not in path.parts
        for name in imported_modules(path)
        if name.split(".")[0] in above
    ]
    assert offenders == []


def test_a_page_of_steps_reads_decisions_and_proposals_in_one_query_each(
    agent, team, make_reviewer, django_assert_num_queries
) -> None:  # type: ignore[no-untyped-def]
    from approvals.services import step_decide
    from envelopes.models import Step
    from envelopes.proposal import input_fingerprint
    from tests.conftest import error_envelope
    from tests.perf.rows import door

    for index in range(3):
        ref, asked = f"op_{index}", {"n": index}
        assert (
            agent.attempt(ref, tool="send_email", fingerprint=input_fingerprint(asked), input=asked).status_code == 201
        )
        agent.envelope(
            error_envelope(
                operation_ref=ref,
                code="REFUND_ABOVE_LIMIT",
                category="authorization",
                retry={"directive": "never", "max_attempts_remaining": 0},
                next_action="request_approval",
            )
        )
    for step in Step.objects.all():
        step_decide(team=team, step_id=step.pk, actor=make_reviewer("rita"), action="approve")
    # The steps; their decisions with reviewers; their proposals; and the API's door, none with
    # the Redis cache (CI), the key's read and the throttle's upsert without it (rows.door).
    with django_assert_num_queries(3 + door()):
        response = agent.get("/api/v1/steps")
    results = response.json()["results"]
    assert [len(step["decisions"]) for step in results] == [1, 1, 1]
    assert [step["proposal"]["input"] for step in results] == [{"n": 2}, {"n": 1}, {"n": 0}]
