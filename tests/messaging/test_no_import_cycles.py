"""The messaging modules import in one direction: the router knows hubs only by a Protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import rxmesh.messaging

PACKAGE = Path(rxmesh.messaging.__file__).parent


def imports_of(module: Path) -> set[str]:
    """The rxmesh.messaging modules ``module`` imports (also under TYPE_CHECKING)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {
        node.module.rsplit(".", 1)[-1]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and node.module.startswith("rxmesh.messaging.")
    }


def test_no_two_messaging_modules_import_each_other() -> None:
    """FAILS against the old router, which imported MessageHub under TYPE_CHECKING from the hub
    that imports it."""
    graph = {path.stem: imports_of(path) for path in PACKAGE.glob("_*.py")}
    circles = sorted((a, b) for a, deps in graph.items() for b in deps if a in graph.get(b, ()))
    assert circles == []


def test_negative_control_the_hub_does_import_the_router() -> None:
    assert "_router" in imports_of(PACKAGE / "_hub.py")
