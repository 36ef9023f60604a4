"""The fuzzers' list of routes (tests/odd_input.py) is the whole truth: every GET route of the
URLconf is in it, and every query parameter the code reads is listed on a route of the module
that reads it. Read statically, so a new `request.GET.get("x")` fails here until it is fuzzed."""

from __future__ import annotations

import ast
import importlib
import inspect
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from django import forms
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from rest_framework import serializers
from rest_framework.pagination import BasePagination

from tests.odd_input import DJANGO_ACCOUNT_PAGES, FRAMEWORK_ROUTES, POST_ONLY, ROUTES
from tests.reviewers.conftest import token_for

ROOT = Path(__file__).resolve().parent.parent
QUERY_DICTS = {"GET", "query_params"}


def _url_names(patterns: list[Any], namespace: str = "") -> list[str]:
    names = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            names += _url_names(pattern.url_patterns, pattern.namespace or namespace)
        elif isinstance(pattern, URLPattern) and pattern.name:
            names.append(f"{namespace}:{pattern.name}" if namespace else pattern.name)
    return names


def _is_query_dict(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in QUERY_DICTS


def _fields_of(value: Any) -> set[str]:
    if inspect.isclass(value) and issubclass(value, forms.BaseForm):
        return set(value.base_fields)
    if inspect.isclass(value) and issubclass(value, serializers.Serializer):
        return set(value().fields)
    return set()


def _module_reads(module_name: str) -> tuple[set[str], list[str]]:
    """The query parameters a module's code reads, and the reads this scan cannot interpret."""
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    names: set[str] = set()
    unknown: list[str] = []

    def constant(node: ast.AST | None) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def classes_in(call: ast.Call) -> set[str]:
        """Fields of the form or serializer classes a call names (as callee or argument)."""
        found: set[str] = set()
        for node in [call.func, *call.args, *(k.value for k in call.keywords)]:
            if isinstance(node, ast.Name):
                found |= _fields_of(getattr(module, node.id, None))
        return found

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            # A paginator reads its own parameters from the query string.
            paginator = getattr(module, node.func.id, None)
            if inspect.isclass(paginator) and issubclass(paginator, BasePagination):
                for attribute in ("cursor_query_param", "page_size_query_param", "page_query_param"):
                    if getattr(paginator, attribute, None):
                        names.add(getattr(paginator, attribute))
        if not _is_query_dict(node):
            continue
        parent = parents[node]
        where = f"{module_name}:{node.lineno}"
        # Names a module builds (`f"{queue.key}_after"`) it lists in QUERY_PARAMETERS.
        built = set(getattr(module, "QUERY_PARAMETERS", ()))
        if isinstance(parent, ast.Attribute) and parent.attr in ("get", "getlist"):
            call = parents[parent]
            assert isinstance(call, ast.Call)
            name = constant(call.args[0] if call.args else None)
            if name is not None:
                names.add(name)
            elif built:
                names |= built
            else:
                unknown.append(where)
        elif isinstance(parent, ast.Subscript) and constant(parent.slice) is not None:
            names.add(constant(parent.slice))  # type: ignore[arg-type]
        elif isinstance(parent, ast.Subscript) and built:
            names |= built
        elif isinstance(parent, ast.Attribute) and parent.attr == "copy":
            pass  # the query string copied whole to link to (a page's next page): no parameter read
        elif isinstance(parent, ast.Compare) and isinstance(parent.ops[0], ast.In) and constant(parent.left):
            names.add(constant(parent.left))  # type: ignore[arg-type]
        elif isinstance(parent, ast.Attribute) and parent.attr == "dict" and isinstance(parents[parent], ast.Call):
            # request.query_params.dict() handed to a serializer: its fields are the parameters.
            call = parents[parents[parent]]
            if isinstance(call, ast.keyword):  # Serializer(data=request.query_params.dict())
                call = parents[call]
            fields = classes_in(call) if isinstance(call, ast.Call) else set()
            if not fields:
                unknown.append(where)
            names |= fields
        elif isinstance(parent, ast.Call) and (fields := classes_in(parent)):
            names |= fields  # request.GET bound to a form
        else:
            unknown.append(where)
    return names, unknown


def _packages() -> list[Path]:
    """The project's own packages: every installed app at the repository's top, and config/."""
    from django.apps import apps

    own = {Path(config.path) for config in apps.get_app_configs() if Path(config.path).parent == ROOT}
    return sorted(own | {ROOT / "config"})


def _modules() -> list[str]:
    found = []
    for package in _packages():
        for path in sorted(package.rglob("*.py")):
            if "migrations" in path.parts or "management" in path.parts:
                continue
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
    return found


def _view_module(path: str) -> str:
    func = resolve(path.format(ref="r", tool="t", team="acme", run_id="r", pk=1)).func
    view = getattr(func, "cls", None) or getattr(func, "view_class", None) or func
    return inspect.unwrap(view).__module__ if not inspect.isclass(view) else view.__module__


def test_every_get_route_of_the_urlconf_is_fuzzed_or_answers_only_post() -> None:
    names = {name for name in _url_names(get_resolver().url_patterns) if not name.startswith("admin:")}

    assert names - set(ROUTES) - POST_ONLY - DJANGO_ACCOUNT_PAGES == set()
    assert set(ROUTES) - names == set(), "a route the fuzzers send no longer exists"
    assert POST_ONLY - names == set()


def test_every_query_parameter_the_code_reads_is_fuzzed_on_a_route_of_its_module() -> None:
    declared: dict[str, set[str]] = defaultdict(set)
    for name, route in ROUTES.items():
        if name not in FRAMEWORK_ROUTES:
            declared[_view_module(route.path)] |= set(route.params)
    read: dict[str, set[str]] = {}
    unknown: list[str] = []
    for module in _modules():
        names, not_understood = _module_reads(module)
        unknown += not_understood
        if names:
            read[module] = names

    assert unknown == [], "a read of the query string this scan cannot name: teach the scan, then fuzz it"
    assert read == {module: names for module, names in declared.items() if names}


def test_the_scan_reads_every_app_of_the_project() -> None:
    names = {path.name for path in _packages()}

    assert {
        "approvals",
        "config",
        "dashboard",
        "envelopes",
        "metrics",
        "notifications",
        "reviewers",
        "webhooks",
    } <= names


def test_the_scan_sees_each_way_the_code_reads_a_parameter() -> None:
    # The scan's own check: each kind of read it knows, found where the code has one today.
    assert {"q"} <= _module_reads("approvals.views")[0]  # request.GET.get("q")
    assert {"team", "tool", "code", "age"} <= _module_reads("approvals.views")[0]  # a form bound to GET
    assert {"add"} <= _module_reads("metrics.views")[0]  # "add" in request.GET
    assert {"state", "cursor", "limit"} <= _module_reads("envelopes.api")[0]  # serializer + paginator
    assert {"since", "until"} == _module_reads("metrics.api")[0]  # Serializer(data=...dict())
    assert {"approvals_after", "waiting_after"} <= _module_reads("approvals.views")[0]  # QUERY_PARAMETERS


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(POST_ONLY))
def test_a_post_only_route_answers_get_with_405(name: str, admin_client: Any, agent: Any, make_reviewer: Any) -> None:
    pattern = next(p for p in _all_patterns() if p[0] == name)[1]
    kwargs = {key: "1" if key == "pk" else "x" for key in pattern.converters}
    path = reverse(name, kwargs=kwargs or None)
    client = admin_client
    if path.startswith("/api/v1/teams/"):
        client = token_for(make_reviewer()).http
    elif path.startswith("/api/"):
        client = agent.http
    response = client.get(path)

    assert response.status_code == 405


def _all_patterns(patterns: list[Any] | None = None, namespace: str = "") -> list[tuple[str, Any]]:
    found = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            found += _all_patterns(pattern.url_patterns, pattern.namespace or namespace)
        elif pattern.name:
            found.append((f"{namespace}:{pattern.name}" if namespace else pattern.name, pattern.pattern))
    return found
