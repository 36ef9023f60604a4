"""The page apps share one shell (dashboard.shell, dashboard.once) and never reach into each
other's views or queries (issue 11, point 7)."""

from __future__ import annotations

import ast
from pathlib import Path

from django.apps import apps

ROOT = Path(__file__).resolve().parents[2]
PAGE_APPS = ("approvals", "metrics", "webhooks", "notifications", "reviewers", "rules")
# What only the approvals app's own pages may use.
APPROVALS_PAGE_MODULES = {"approvals.views", "approvals.queries", "approvals.once", "approvals.timeline"}


def _imports(app: str) -> list[tuple[str, str]]:
    """(file, imported module) for every absolute import in an app, `from x import y` giving
    both `x` and `x.y` (so `from approvals import queries` counts as `approvals.queries`)."""
    found = []
    for path in (ROOT / app).rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(rel, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((rel, node.module))
                found += [(rel, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_no_page_app_imports_the_approvals_pages() -> None:
    offenders = [
        f"{path}: {module}"
        for app in ("metrics", "webhooks", "notifications")
        for path, module in _imports(app)
        if module in APPROVALS_PAGE_MODULES
    ]
    assert offenders == []


def test_no_page_app_imports_another_apps_views() -> None:
    offenders = [
        f"{path}: {module}"
        for app in PAGE_APPS
        for path, module in _imports(app)
        if module.endswith(".views") and module.split(".")[0] in PAGE_APPS and module.split(".")[0] != app
    ]
    assert offenders == []


def test_the_shell_sits_below_the_page_apps() -> None:
    """dashboard reads who belongs to which team from accounts, and nothing above it."""
    offenders = [f"{path}: {module}" for path, module in _imports("dashboard") if module.split(".")[0] in PAGE_APPS]
    assert offenders == []


def test_no_page_app_reads_roles_from_another_page_app() -> None:
    """Teams, memberships and keys are accounts' (issue 24): every page app, and the shell, reads
    them from accounts.models, none from another app."""
    role_models = ("Team", "Membership", "ApiKey")
    offenders = [
        f"{path}: {module}"
        for app in (*PAGE_APPS, "dashboard")
        for path, module in _imports(app)
        if module.rpartition(".")[2] in role_models and module.rpartition(".")[0] != "accounts.models"
    ]
    assert offenders == []
    # Its roles and decisions left approvals (issue 24); its one model is the cancel-all outbox.
    assert [model.__name__ for model in apps.get_app_config("approvals").get_models()] == ["CancelAllRequest"]


def test_the_one_time_tokens_have_one_home() -> None:
    assert not (ROOT / "approvals" / "once.py").exists()
    assert (ROOT / "dashboard" / "once.py").exists()


def test_the_page_apps_use_the_shell() -> None:
    users = {app for app in PAGE_APPS for _, module in _imports(app) if module.startswith("dashboard.")}
    assert {"approvals", "metrics", "webhooks", "notifications"} <= users
