"""Every exception rxmesh raises on purpose is in the one tree, rxmesh.exceptions (issue 15)."""

from __future__ import annotations

import rxmesh.exceptions as tree
from rxmesh import ledger
from rxmesh.exceptions import (
    JournalError,
    MalformedWitnessRecordError,
    PendingWriteHeldError,
    RxMeshError,
)
from rxmesh.nodetypes import prewarm
from tests.test_public_api import OUTSIDE_ALL


def test_the_journal_witness_and_ledger_errors_are_in_the_tree_and_re_exported() -> None:
    for error in (JournalError, MalformedWitnessRecordError, PendingWriteHeldError):
        assert issubclass(error, RxMeshError)
        assert error.__module__ == "rxmesh.exceptions"
        assert error.__name__ in {*tree.__all__, *OUTSIDE_ALL["rxmesh.exceptions"]}
        assert error.__name__ in (tree.__doc__ or "")  # drawn in the tree
    assert ledger.JournalError is JournalError
    assert ledger.PendingWriteHeldError is PendingWriteHeldError
    assert "MalformedWitnessRecordError" not in prewarm.__all__  # one home: rxmesh.exceptions
    assert issubclass(MalformedWitnessRecordError, ValueError)  # ``except ValueError`` still works


def test_every_public_exception_of_the_package_lives_in_the_tree() -> None:
    import importlib
    import pkgutil

    import rxmesh

    found = set()
    for module in pkgutil.walk_packages(rxmesh.__path__, "rxmesh."):
        private = any(part.startswith("_") for part in module.name.split("."))
        if private or ".providers.postgres" in module.name:
            continue  # private modules' internals; postgres needs asyncpg (checked below)
        loaded = importlib.import_module(module.name)
        for name in getattr(loaded, "__all__", ()):
            value = getattr(loaded, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                found.add(value)
    from rxmesh.providers import postgres

    found |= {
        value
        for name in postgres.__all__
        if isinstance(value := getattr(postgres, name), type) and issubclass(value, BaseException)
    }
    assert found, "no exceptions found"
    assert {e for e in found if e.__module__ != "rxmesh.exceptions"} == set()
