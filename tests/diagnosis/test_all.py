"""The diagnosis package's __all__ is honest: every name exists, every public name is listed,
except the log's field-name constants (users match the strings; the mesh's terminal arm binds
them)."""

from __future__ import annotations

import importlib
import types

import pytest

from tests.test_public_api import OUTSIDE_ALL

MODULES = [
    "rxmesh.diagnosis",
    "rxmesh.diagnosis._adjacency",
    "rxmesh.diagnosis._fields",
    "rxmesh.diagnosis._monitor",
    "rxmesh.diagnosis._triage",
    "rxmesh.cli",
]

LOG_FIELDS = {
    "EVENT_LOOP_STALL",
    "EVENT_STORE_UNREACHABLE",
    "FIELD_EVENT",
    "FIELD_STALL_ENDED_BEFORE_SECONDS",
    "FIELD_STALL_GC_SECONDS",
    "FIELD_STALL_SECONDS",
}
"""Names of rxmesh.diagnosis._fields kept out of the package's __all__."""

DOCUMENTED = set(OUTSIDE_ALL["rxmesh.diagnosis"])
"""Importable from the package and documented, outside its __all__ (reports, statistics, the
triage's defaults)."""


@pytest.mark.parametrize("name", MODULES)
def test_every_name_in_all_exists(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n))
    for exported in module.__all__:
        assert hasattr(module, exported), exported


def test_the_package_exports_every_public_name_of_its_modules() -> None:
    package = importlib.import_module("rxmesh.diagnosis")
    for name in MODULES[1:-1]:
        module = importlib.import_module(name)
        assert set(module.__all__) - LOG_FIELDS <= set(package.__all__) | DOCUMENTED, name
    assert not (LOG_FIELDS | DOCUMENTED) & set(package.__all__)
    public = {
        n
        for n, v in vars(package).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n != "annotations"
    }
    assert public - LOG_FIELDS == set(package.__all__) | DOCUMENTED
