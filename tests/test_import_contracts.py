"""The import contracts in pyproject.toml hold today and break when their rule is broken.

Each case copies the project's packages (their .py files) and pyproject.toml into a temporary
tree, adds one forbidden import, and runs `lint-imports` on that tree in a fresh process."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
PACKAGES: list[str] = CONFIG["root_packages"]
CONTRACTS: dict[str, str] = {contract["id"]: contract["name"] for contract in CONFIG["contracts"]}


def lint_imports(tree: Path, *contract_ids: str) -> subprocess.CompletedProcess[str]:
    # cwd is the tree, so lint-imports reads the tree's pyproject.toml: the project's contracts.
    command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache", "--no-logo"]
    for contract_id in contract_ids:
        command += ["--contract", contract_id]
    # The tree alone on the path: the packages lint-imports finds are the ones in `tree`.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=60, check=False)


def copy_project(into: Path) -> Path:
    """The project's packages, .py files only, and its pyproject.toml (the same contracts)."""
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package,
            into / package,
            ignore=lambda folder, names: [
                name for name in names if not name.endswith(".py") and not (Path(folder) / name).is_dir()
            ],
        )
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


@dataclass(frozen=True)
class Breach:
    contract_id: str
    module: str  # the module that gains the import, dotted
    code: str  # appended to that module
    chain: str  # the import lint-imports must report, "importer -> imported"


BREACHES = [
    Breach(
        "accounts-at-the-bottom",
        "accounts.services",
        "from envelopes import models",
        "accounts.services -> envelopes.models",
    ),
    Breach("core-below-consumers", "envelopes.events", "import webhooks.outbox", "envelopes.events -> webhooks.outbox"),
    Breach(
        "limits-at-the-bottom",
        "limits.client_ip",
        "from envelopes import models",
        "limits.client_ip -> envelopes.models",
    ),
    Breach(
        "telemetry-at-the-bottom",
        "telemetry.spans",
        "from envelopes import models",
        "telemetry.spans -> envelopes.models",
    ),
    Breach(
        "evidence-below-core",
        "evidence.receipts",
        "from envelopes import models",
        "evidence.receipts -> envelopes.models",
    ),
    Breach("policy-below-core", "policy.words", "from envelopes import models", "policy.words -> envelopes.models"),
    Breach("shell-below-pages", "dashboard.once", "import metrics.queries", "dashboard.once -> metrics.queries"),
    Breach(
        "approvals-views-private",
        "reviewers.services",
        "import approvals.views",
        "reviewers.services -> approvals.views",
    ),
    Breach("metrics-views-private", "approvals.queries", "from metrics import api", "approvals.queries -> metrics.api"),
    Breach(
        "notifications-views-private",
        "webhooks.delivery",
        "from notifications.slack import slack_actions",
        "webhooks.delivery -> notifications.slack",
    ),
    Breach("outbound-below-senders", "outbound.http", "import webhooks.models", "outbound.http -> webhooks.models"),
    Breach(
        "outbound-below-senders",
        "outbound.doorbell",
        "def _late() -> None:\n    from notifications import tasks  # noqa\n",
        "outbound.doorbell -> notifications.tasks",
    ),
    Breach(
        "notifications-beside-webhooks",
        "notifications.sending",
        "from webhooks import delivery",
        "notifications.sending -> webhooks.delivery",
    ),
    Breach("reviewers-views-private", "metrics.panels", "import reviewers.views", "metrics.panels -> reviewers.views"),
    Breach(
        "webhooks-views-private",
        "notifications.sending",
        "import webhooks.views",
        "notifications.sending -> webhooks.views",
    ),
    Breach("rules-views-private", "metrics.panels", "import rules.views", "metrics.panels -> rules.views"),
    Breach("shell-below-pages", "dashboard.shell", "from rules import services", "dashboard.shell -> rules.services"),
    Breach("core-below-consumers", "envelopes.audit", "import rules.models", "envelopes.audit -> rules.models"),
    # An import inside a function counts as much as one at the top.
    Breach(
        "core-below-consumers",
        "envelopes.transitions",
        "def _late() -> None:\n    from approvals import services  # noqa\n",
        "envelopes.transitions -> approvals.services",
    ),
]


def test_the_contracts_see_every_project_app() -> None:
    # A new app left out of root_packages would be invisible to every contract.
    from django.conf import settings

    apps = {name.split(".")[0] for name in settings.INSTALLED_APPS if (ROOT / name.split(".")[0]).is_dir()}
    assert {"envelopes", "approvals", "webhooks", "notifications", "reviewers", "dashboard"} <= apps
    assert set(PACKAGES) == apps | {"config", "outbound", "telemetry"}  # the packages that are no app


def test_every_contract_has_a_breach_that_breaks_it() -> None:
    assert len(CONTRACTS) == len(CONFIG["contracts"]), "contract ids are unique"
    assert set(CONTRACTS) == {breach.contract_id for breach in BREACHES}


def test_the_project_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in result.stdout
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_the_copied_tree_keeps_every_contract(tmp_path: Path) -> None:
    # The breaches below fail on their one added import, not on the copy itself.
    result = lint_imports(copy_project(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


@pytest.mark.parametrize("breach", BREACHES, ids=lambda breach: f"{breach.contract_id}:{breach.module}")
def test_a_forbidden_import_breaks_its_contract(tmp_path: Path, breach: Breach) -> None:
    tree = copy_project(tmp_path)
    path = tree.joinpath(*breach.module.split(".")).with_suffix(".py")
    assert path.is_file(), f"{breach.module} is not a module of the project"
    path.write_text(path.read_text() + "\n" + breach.code + "\n")

    result = lint_imports(tree, breach.contract_id)

    assert result.returncode != 0, result.stdout
    assert f"{CONTRACTS[breach.contract_id]} BROKEN" in result.stdout
    assert breach.chain in result.stdout


def test_an_indirect_import_breaks_the_contract(tmp_path: Path) -> None:
    # accounts imports limits, which is allowed; limits reaching a page app then puts that app
    # under accounts, and accounts' contract reports the chain.
    tree = copy_project(tmp_path)
    throttle = tree / "limits" / "throttle.py"
    throttle.write_text(throttle.read_text() + "\nimport approvals.services\n")
    assert "from limits.throttle import" in (tree / "accounts" / "auth.py").read_text()

    result = lint_imports(tree, "accounts-at-the-bottom")

    assert result.returncode != 0, result.stdout
    assert f"{CONTRACTS['accounts-at-the-bottom']} BROKEN" in result.stdout
    assert "limits.throttle -> approvals.services" in result.stdout


def test_a_paid_debt_fails_until_its_ignore_is_deleted(tmp_path: Path) -> None:
    # Every ignore_imports entry names an import that exists: when the code stops making it,
    # lint-imports fails on the stale entry, so the list of debts stays the list of debts.
    tree = copy_project(tmp_path)
    auth = tree / "accounts" / "auth.py"
    assert "from envelopes import modelsql\n" in auth.read_text()
    auth.write_text(auth.read_text().replace("from envelopes import modelsql\n", ""))

    result = lint_imports(tree, "accounts-at-the-bottom")

    assert result.returncode != 0, result.stdout
    assert "No matches for ignored import accounts.auth -> envelopes.modelsql" in result.stdout + result.stderr


def test_no_app_loads_a_project_module_by_a_literal_name() -> None:
    """lint-imports reads import statements only: `import_module("approvals.x")` would slip past
    every contract, so no app loads a project module that way (config wires apps by setting)."""
    offenders = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                if getattr(node.func, "id", getattr(node.func, "attr", "")) not in ("import_module", "__import__"):
                    continue
                offenders += [
                    f"{path.relative_to(ROOT)}: {arg.value}"
                    for arg in node.args
                    if isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and arg.value.split(".")[0] in PACKAGES
                ]
    assert offenders == []
