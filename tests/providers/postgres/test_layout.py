"""The package's layout as its docstring states it: every module is listed there, and each one
imports only modules listed after it: imports point one way."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rxmesh.providers.postgres as package

HERE = Path(package.__file__).parent


def listed() -> list[str]:
    """The modules in the order the package's docstring lists them."""
    order: list[str] = []
    for name in re.findall(r"``(_[a-z_]+)``", package.__doc__ or ""):
        if name not in order:
            order.append(name)
    return order


def imports() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (parsed, not run)."""
    graph: dict[str, set[str]] = {}
    for path in HERE.glob("_*.py"):
        if path.stem == "__init__":
            continue
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                head, _, tail = node.module.rpartition(".")
                if head == "rxmesh.providers.postgres":
                    found.add(tail)
                elif node.module == "rxmesh.providers.postgres":
                    found.update(alias.name for alias in node.names)
        graph[path.stem] = found
    return graph


def upward(order: list[str], graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} imports {dep}, listed before it"
        for module, deps in sorted(graph.items())
        for dep in sorted(deps)
        if order.index(dep) < order.index(module)
    ]


def test_every_module_is_listed_in_the_docstring() -> None:
    assert sorted(imports()) == sorted(listed())


def test_imports_point_down_the_list() -> None:
    assert upward(listed(), imports()) == []


def test_negative_control_an_import_up_the_list_is_reported() -> None:
    graph = imports()
    graph["_errors"].add("_store")
    assert upward(listed(), graph) == ["_errors imports _store, listed before it"]
