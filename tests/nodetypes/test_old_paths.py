"""``rxmesh.census`` and ``rxmesh.prewarm`` are kept import paths: each re-exports the names of
its module in :mod:`rxmesh.nodetypes`, the same objects, and nothing else (no exception: those
have one home, :mod:`rxmesh.exceptions`)."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    ("old", "home"),
    [("rxmesh.census", "rxmesh.nodetypes.census"), ("rxmesh.prewarm", "rxmesh.nodetypes.prewarm")],
)
def test_the_old_path_re_exports_its_home_names_as_the_same_objects(old: str, home: str) -> None:
    kept, module = importlib.import_module(old), importlib.import_module(home)
    assert sorted(kept.__all__) == sorted(module.__all__)
    for name in module.__all__:
        assert getattr(kept, name) is getattr(module, name), name
    assert home in (kept.__doc__ or ""), "the docstring says where the names live"


def test_neither_path_names_an_exception() -> None:
    import rxmesh.census
    import rxmesh.exceptions
    import rxmesh.prewarm

    exceptions = set(rxmesh.exceptions.__all__)
    assert not set(rxmesh.prewarm.__all__) & exceptions
    assert not set(rxmesh.census.__all__) & exceptions
    assert "MalformedWitnessRecordError" in exceptions  # control: the one the sweep raises
