"""docs/architecture.md against the tree: the modules it names exist, imports point down, and no
package imports another's private modules or names (``rxmesh._util`` is shared by design).

The dependency rules are checked on the imports each module really makes (parsed, not run,
``TYPE_CHECKING`` imports included), grouped by package. Each rule has its negative control: the
same checker, handed a graph with the forbidden edge added, reports it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rxmesh

PACKAGE = Path(rxmesh.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"

CROSS_CUTTING = {
    "rxmesh.faults",
    "rxmesh.exceptions",
    "rxmesh.model",
    "rxmesh.operations",
    "rxmesh.instrumentation",
    "rxmesh._util",
}
ALLOWED: dict[str, set[str]] = {
    # a package: what it may import inside rxmesh (besides itself)
    **dict.fromkeys(CROSS_CUTTING, CROSS_CUTTING),
    "rxmesh.operators": CROSS_CUTTING,
    "rxmesh.providers": CROSS_CUTTING | {"rxmesh.aio"},
    "rxmesh.ledger": CROSS_CUTTING | {"rxmesh.aio"},
    "rxmesh.cache": CROSS_CUTTING,
}


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def import_graph() -> dict[str, set[str]]:
    """Package -> the rxmesh packages its modules import."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        package = _package(module)
        graph.setdefault(package, set()).update(
            _package(t) for t in targets if t.split(".")[0] in ("rxmesh", "tests")
        )
        graph[package].discard(package)
    return graph


def violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for package, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if dep.startswith("tests"):
                found.append(f"{package} imports {dep}: the package never imports the tests")
            elif dep == "rxmesh.testing" and package not in ("rxmesh.drill", "rxmesh.testing"):
                found.append(f"{package} imports rxmesh.testing (only the drill may)")
            elif package in ALLOWED and dep not in ALLOWED[package]:
                found.append(f"{package} imports {dep}: up the picture")
    return found


def test_imports_point_down_the_picture() -> None:
    assert violations(import_graph()) == []


def test_negative_control_an_edge_up_the_picture_is_reported() -> None:
    for package, forbidden in (
        ("rxmesh.providers", "rxmesh.mesh"),
        ("rxmesh.operators", "rxmesh.providers"),
        ("rxmesh.faults", "rxmesh.operators"),
        ("rxmesh.ledger", "rxmesh.mesh"),
        ("rxmesh.mesh", "rxmesh.testing"),
        ("rxmesh.cli", "tests.helpers"),
    ):
        graph = import_graph()
        graph.setdefault(package, set()).add(forbidden)
        assert any(f"{package} imports {forbidden}" in v for v in violations(graph)), forbidden


SHARED_PRIVATE = "rxmesh._util"
"""The one private package every other package may import: the helpers several of them share."""

_EVENTS = "rxmesh.instrumentation._events"
_SEAM = "rxmesh.instrumentation._seam"
_STORE_AND_LADDER = {
    "rxmesh.providers._store",  # feed_is_whole(): whether a store reports every commit
    "rxmesh.operators._ladder",  # Ladder, the delays' scale
}
CROSSINGS_LEFT: dict[str, set[str]] = {
    # the instrumentation seam (_seam) and its event names (_events): every layer emits through it
    "rxmesh.cache": {_EVENTS, _SEAM},
    "rxmesh.diagnosis": {_EVENTS, _SEAM},
    "rxmesh.health": {_EVENTS, _SEAM},
    "rxmesh.ledger": {_EVENTS, _SEAM},
    "rxmesh.operators": {_SEAM},
    "rxmesh.testing": {_SEAM} | _STORE_AND_LADDER,
    # the content check's one-walk shortcut, judged before a request reaches the store
    "rxmesh.mesh": {_SEAM, "rxmesh.model._rules"} | _STORE_AND_LADDER,
    # the change feed checks a stored path against the path rule's one-regex shortcut
    "rxmesh.providers": {_EVENTS, _SEAM, "rxmesh.model._rules"},
    # the async drivers are exported by rxmesh.aio; their code drives the ladder in operators
    "rxmesh.aio": {
        "rxmesh.operators._aio_reopen_on_transient_fault",
        "rxmesh.operators._aio_retry_transient_connect",
    },
}
"""Private modules and names one package still takes from another, each with its reason: the
list only shrinks (a new crossing fails the test below)."""


def _is_private(target: str, names: list[str]) -> list[str]:
    """What of ``from target import names`` is private to ``target``'s package."""
    parts = target.split(".")
    if _package(target) != SHARED_PRIVATE and any(p.startswith("_") for p in parts[1:]):
        return [target]
    return [f"{target}.{name}" for name in names if name.startswith("_")]


def private_crossings() -> dict[str, set[str]]:
    """Package -> the private modules and names of other packages its modules import."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] != "rxmesh":
                continue
            if _package(node.module) == _package(module):
                continue
            private = _is_private(node.module, [alias.name for alias in node.names])
            found.setdefault(_package(module), set()).update(private)
    return {package: targets for package, targets in found.items() if targets}


def new_crossings(found: dict[str, set[str]]) -> list[str]:
    return [
        f"{package} imports {target}, private to {_package(target)}"
        for package, targets in sorted(found.items())
        for target in sorted(targets - CROSSINGS_LEFT.get(package, set()))
    ]


def test_no_package_imports_a_private_name_of_another() -> None:
    assert new_crossings(private_crossings()) == []


def test_every_crossing_listed_still_happens() -> None:
    # A crossing that was fixed is taken off CROSSINGS_LEFT, so the list says what is left.
    found = private_crossings()
    stale = {
        package: sorted(targets - found.get(package, set()))
        for package, targets in CROSSINGS_LEFT.items()
        if targets - found.get(package, set())
    }
    assert stale == {}


def test_negative_control_a_private_import_across_packages_is_reported() -> None:
    found = private_crossings()
    found.setdefault("rxmesh.mesh", set()).add("rxmesh.aio._OneShot")
    found.setdefault("rxmesh.importer", set()).add("rxmesh.model._rules")
    assert new_crossings(found) == [
        "rxmesh.importer imports rxmesh.model._rules, private to rxmesh.model",
        "rxmesh.mesh imports rxmesh.aio._OneShot, private to rxmesh.aio",
    ]
    assert _is_private("rxmesh._util.trusted", ["trusted"]) == []  # control: the shared helpers


def test_every_module_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"\brxmesh(?:\.[a-z_]+)+", text))
    assert named, "the page names no module"
    for name in sorted(named):
        relative = Path(*name.split("."))
        assert (PACKAGE.parent / relative).is_dir() or (
            PACKAGE.parent / relative.with_suffix(".py")
        ).is_file(), f"docs/architecture.md names {name}, which does not exist"
    mesh_jobs = re.findall(r"^\s+│\s+(_[a-z_]+)\s", text, flags=re.MULTILINE)
    assert len(mesh_jobs) >= 8
    for job in mesh_jobs:
        assert (PACKAGE / "mesh" / f"{job}.py").is_file(), f"rxmesh/mesh/{job}.py is named"


def test_the_page_names_every_module_of_the_mesh() -> None:
    text = DOC.read_text(encoding="utf-8")
    for path in (PACKAGE / "mesh").glob("_*.py"):
        if path.stem != "__init__":
            assert path.stem in text, f"docs/architecture.md does not show rxmesh/mesh/{path.name}"


MAX_LINES = 600
"""A module holds one thought; past this many lines it holds more than one, whichever it is."""


def oversized(root: Path, limit: int = MAX_LINES) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root.parent).as_posix()
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > limit:
            found.append(f"{name}: {lines} lines")
    return found


def test_no_module_exceeds_600_lines() -> None:
    assert oversized(PACKAGE) == []


def test_negative_control_a_lower_limit_finds_the_large_modules() -> None:
    assert oversized(PACKAGE, limit=300), "a 300-line limit must catch some module"


# -- the layout explained where it is: each package names its modules ---------------------------


def unexplained(root: Path) -> list[str]:
    """Modules and sub-packages that their package's ``__init__`` docstring does not name."""
    found = []
    for init in sorted(root.rglob("__init__.py")):
        package = init.parent
        explained = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for member in sorted(package.iterdir()):
            if member.name in ("__init__.py", "__main__.py", "__pycache__"):
                continue
            name = member.stem if member.suffix == ".py" else member.name
            if member.suffix != ".py" and not (member / "__init__.py").is_file():
                continue
            if not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", explained):
                found.append(f"{package.relative_to(root.parent).as_posix()}: {name}")
    return found


def test_every_package_explains_its_layout_in_its_docstring() -> None:
    """A module holds one job, and its package says which, in a few lines at the top (as trio
    does): a module nobody explained is found here."""
    assert unexplained(PACKAGE) == []


def test_negative_control_an_unexplained_module_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""The layout: ``_named`` does one thing."""\n')
    (package / "_named.py").write_text("")
    (package / "_forgotten.py").write_text("")
    assert unexplained(package) == ["pkg: _forgotten"]
