"""``rxmesh.census`` and ``rxmesh.prewarm`` are kept import paths: each still imports the names of
its home in :mod:`rxmesh.nodetypes` (the same objects) and exports none of them, so every name has
one home; no exception among them (those have theirs, :mod:`rxmesh.exceptions`)."""

from __future__ import annotations

import importlib

import pytest

from tests.test_public_api import OUTSIDE_ALL

PATHS = [
    ("rxmesh.census", "rxmesh.nodetypes.census"),
    ("rxmesh.prewarm", "rxmesh.nodetypes.prewarm"),
]


@pytest.mark.parametrize(("old", "home"), PATHS)
def test_the_old_path_imports_its_home_names_as_the_same_objects(old: str, home: str) -> None:
    kept, module = importlib.import_module(old), importlib.import_module(home)
    assert module.__all__, "control: the home exports names"
    for name in module.__all__:
        assert getattr(kept, name) is getattr(module, name), name
    assert kept.__all__ == []  # one home per name
    assert home in (kept.__doc__ or ""), "the docstring says where the names live"


def test_the_sweep_exports_no_exception() -> None:
    import rxmesh.exceptions
    import rxmesh.nodetypes.prewarm
    import rxmesh.prewarm

    exceptions = set(rxmesh.exceptions.__all__) | set(OUTSIDE_ALL["rxmesh.exceptions"])
    assert not set(rxmesh.nodetypes.prewarm.__all__) & exceptions
    assert not hasattr(rxmesh.prewarm, "MalformedWitnessRecordError")
    assert "MalformedWitnessRecordError" in exceptions  # control: the one the sweep raises
