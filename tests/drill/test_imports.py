"""The shipped CLI imports no test helper: nothing under rxmesh/ imports from tests/, and importing
rxmesh.cli or rxmesh.drill loads no rxmesh.testing (the drill imports it when a run starts)."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.helpers import ROOT

PROBE = """
import sys
{setup}
loaded = sorted(
    name for name in sys.modules
    if name.split(".")[0] == "tests" or name == "rxmesh.testing"
    or name.startswith("rxmesh.testing.")
)
print(",".join(loaded))
"""


def _loaded_after(setup: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [name for name in done.stdout.strip().split(",") if name]


def test_importing_the_cli_and_the_drill_loads_no_test_helper() -> None:
    setup = "import rxmesh.cli, rxmesh.drill, rxmesh.drill.invariants\nrxmesh.cli._parser()"
    assert _loaded_after(setup) == []


def test_the_probe_sees_the_test_helpers_once_a_run_builds_its_backend() -> None:
    # Negative control: the lazy import, once it happens, is seen by the same probe.
    setup = "from rxmesh.drill._runner import _backend\n_backend(None, None)"
    assert "rxmesh.testing" in _loaded_after(setup)


def imports_of_tests(source: str) -> list[str]:
    """The ``tests`` modules a Python source imports (``import tests.x``, ``from tests...``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "tests"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [node.module] if node.module.split(".")[0] == "tests" else []
    return found


def test_no_module_under_rxmesh_imports_from_tests() -> None:
    offenders = {
        str(path.relative_to(ROOT)): imports_of_tests(path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "rxmesh").rglob("*.py"))
    }
    assert len(offenders) > 20  # control: the walk found the package
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_scan_flags_an_import_from_tests() -> None:
    # Negative control for the scan itself, in both spellings, and nested in a function.
    source = "import tests.helpers\ndef f():\n    from tests.postgres.kinds import x\n"
    assert imports_of_tests(source) == ["tests.helpers", "tests.postgres.kinds"]
    assert imports_of_tests("from testsuite import y\nimport rxmesh.testing\n") == []
