"""README.md's "Environment variables" table names every variable the repository reads, and only
those, each with the readers that really read it; the apps read settings, never the environment.

A read is `env.<cast>("NAME")` in config/settings.py; `os.environ.get("NAME")`, `os.environ["NAME"]`,
`os.getenv("NAME")` or `environ.get("NAME")` in Python; `${NAME:-…}` (or `${NAME-…}`, `${NAME:+…}`)
in a shell script; `process.env.NAME` in TypeScript."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "config" / "settings.py"
APPS: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]

# Who reads, as the table's last column names them, and where each one's reads are.
SERVER_OR_WORKER = ("server", "worker")  # every Django process: they read config/settings.py
READERS: dict[str, list[str]] = {
    "CLI": ["scripts/run", "scripts/test", ".ci/run", "*/management/commands/*.py"],
    "SDK": ["sdk/holdpoint_sdk/**/*.py", "examples/**/*.py", "examples/**/*.ts", "sdk-js/src/**/*.ts"],
    "test harness": ["tests/**/*.py"],
    "bench": ["bench/**/*.py", "bench/run", "bench/*.sh"],
}
# Read, but not Holdpoint's to document.
NOT_OURS = {"PATH", "TMPDIR", "DJANGO_LIVE_TEST_SERVER_ADDRESS", "PYTEST_XDIST_WORKER"}
NOT_OURS_PREFIXES = ("UPSTREAM_",)  # tests/mcp's fake MCP upstream reads what its own test sets

NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
SHELL_READ = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-+=?])")
SHELL_ASSIGNMENT = re.compile(r"(?:^|[\s;(])(?:export |local )?([A-Z][A-Z0-9_]*)=")
TYPESCRIPT_READ = re.compile(r"process\.env(?:\.([A-Z][A-Z0-9_]*)|\[\"([A-Z][A-Z0-9_]*)\"\])")


def _first_name(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value if NAME.match(call.args[0].value) else None
    return None


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id in {"environ", "env"}
    )


def python_environment_reads(source: str) -> set[str]:
    found: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if (node.func.attr == "get" and _is_environ(node.func.value)) or node.func.attr == "getenv":
                found.add(_first_name(node) or "")
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _is_environ(node.value)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            found.add(node.slice.value)
    if "environ.Env()" in source:  # a settings module of its own (bench/floor/settings.py)
        found |= django_environ_reads(tree)
    return found - {""}


def shell_environment_reads(script: str) -> set[str]:
    """`${NAME:-…}` reads of a name the script has not set on an earlier line (its own variable)."""
    found, assigned = set(), set()
    for line in script.splitlines():
        if line.lstrip().startswith("#"):
            continue
        found |= set(SHELL_READ.findall(line)) - assigned
        assigned |= set(SHELL_ASSIGNMENT.findall(line))
    return found


def django_environ_reads(tree: ast.AST) -> set[str]:
    """`env.str("NAME", ...)`, `env.db("NAME")` and the like, with `env = environ.Env()`."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "env"
        ):
            found.add(_first_name(node) or "")
    return found - {""}


def settings_file_reads() -> set[str]:
    return django_environ_reads(ast.parse(SETTINGS.read_text()))


def reads_of(pattern: str) -> set[str]:
    found: set[str] = set()
    for path in ROOT.glob(pattern):
        if not path.is_file() or ".venv" in path.parts or "node_modules" in path.parts:
            continue
        text = path.read_text()
        if path.suffix == ".py":
            found |= python_environment_reads(text)
        elif path.suffix == ".ts":
            found |= {a or b for a, b in TYPESCRIPT_READ.findall(text)}
        else:
            found |= shell_environment_reads(text)
    return {name for name in found if name not in NOT_OURS and not name.startswith(NOT_OURS_PREFIXES)}


def readers_in_code() -> dict[str, set[str]]:
    readers: dict[str, set[str]] = defaultdict(set)
    for name in settings_file_reads():
        readers[name].add("server or worker")
    for reader, patterns in READERS.items():
        for pattern in patterns:
            for name in reads_of(pattern):
                readers[name].add(reader)
    return readers


def readme_table() -> dict[str, set[str]]:
    """Each row's variable and the readers its last column names ("server" and "worker" as one)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = re.match(r"^\| `([A-Z][A-Z0-9_]*)` \|(.*)\| ([^|]+) \|$", line)
        if match is None:
            continue
        name, middle, last = match.groups()
        assert name not in table, f"{name} has two rows"
        assert middle.count(" | ") == 1 and all(cell.strip() for cell in middle.split(" | ")), line
        named = {reader.strip() for reader in last.split(",")}
        assert named <= {*SERVER_OR_WORKER, *READERS}, f"{name}: unknown reader in {last!r}"
        table[name] = {reader for reader in named if reader not in SERVER_OR_WORKER} | (
            {"server or worker"} if named & set(SERVER_OR_WORKER) else set()
        )
    return table


def test_every_variable_read_is_in_the_readme_table_with_its_readers() -> None:
    code, table = readers_in_code(), readme_table()

    assert sorted(set(code) - set(table)) == [], "read by the code, missing from README's table"
    assert {name: table[name] for name in code} == dict(code)


def test_every_variable_in_the_readme_table_is_read() -> None:
    code, table = readers_in_code(), readme_table()

    assert sorted(set(table) - set(code)) == [], "in README's table, read by nothing"


def test_every_variable_config_settings_reads_is_in_the_table_as_the_server_or_workers() -> None:
    table = readme_table()

    assert len(settings_file_reads()) > 30
    for name in settings_file_reads():
        assert "server or worker" in table.get(name, set()), name


def test_the_apps_read_settings_not_the_environment() -> None:
    """Each setting is read from the environment once, in config/settings.py, with its default; a
    command's own input (createreviewer's HOLDPOINT_PASSWORD, as Django's createsuperuser reads
    DJANGO_SUPERUSER_PASSWORD) is a CLI read, in the table. Anything else reads `settings.X`."""
    offenders = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if path == SETTINGS or "management" in path.relative_to(ROOT).parts:
                continue
            source = path.read_text()
            if python_environment_reads(source):
                offenders.append(f"{path.relative_to(ROOT)} reads the environment")
            for node in ast.walk(ast.parse(source)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "getattr"
                    and len(node.args) == 3
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id == "settings"
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} writes a setting's default again")

    assert offenders == []


def test_the_reads_are_found_where_they_are() -> None:
    # The finder itself: each form of read it claims to see, and a write it must not count.
    python = 'os.environ.get("A_B", "x")\nos.environ["C"]\nos.getenv("D")\nenviron.get("E")\nos.environ["F"] = "1"'
    assert python_environment_reads(python) == {"A_B", "C", "D", "E"}
    assert python_environment_reads('env = environ.Env()\nenv.int("G", default=1)\nenv.get("H")') == {"G", "H"}
    shell = 'x="${HOLDPOINT_BIND:-1}" y=${CI:-} z=$ROOT ${A-b}\nOWN=\n${OWN:+x} ${ROOT:-}\n'
    shell += 'export D="${D:-1}"\n# E=1\n${E:-}'
    assert shell_environment_reads(shell) == {"HOLDPOINT_BIND", "CI", "A", "ROOT", "D", "E"}
    assert {a or b for a, b in TYPESCRIPT_READ.findall('process.env["X_Y"] ?? process.env.Z')} == {"X_Y", "Z"}
