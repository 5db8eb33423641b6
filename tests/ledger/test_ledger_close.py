"""The ledger releases the journal directory it holds open: on close(), when its load fails, and
when a mesh that made the ledger itself is disposed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rxmesh import Mesh, MeshNode
from rxmesh.exceptions import JournalError
from rxmesh.ledger import JOURNAL_DIR_ENV, PendingWrite, PendingWriteLedger
from rxmesh.providers.memory import InMemoryStore
from tests.helpers import ALICE


def open_directories(target: Path) -> int:
    """How many of this process's descriptors point at ``target``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(target):
                count += 1
        except OSError:
            continue
    return count


def intent(path: str = "p/a") -> PendingWrite:
    return PendingWrite(
        node=MeshNode(path=path, content={}),
        requester="alice",
        access=ALICE,
        request_id="r1",
    )


def test_close_releases_the_directory_and_later_records_fail_loudly(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    ledger = PendingWriteLedger(journal)
    assert open_directories(journal) == 1
    ledger.close()
    ledger.close()  # idempotent
    assert open_directories(journal) == 0
    with pytest.raises(JournalError):
        ledger.record(intent())


def test_negative_control_an_open_ledger_records(tmp_path: Path) -> None:
    ledger = PendingWriteLedger(tmp_path / "journal")
    assert ledger.record(intent())
    ledger.close()
    assert [p.path for p in PendingWriteLedger(tmp_path / "journal").pending()] == ["p/a"]


def test_a_mesh_closes_the_ledger_it_made_but_not_one_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own"
    monkeypatch.setenv(JOURNAL_DIR_ENV, str(own))
    mesh = Mesh(InMemoryStore())
    assert open_directories(own) == 1
    mesh.dispose()
    assert open_directories(own) == 0

    given = PendingWriteLedger(tmp_path / "given")
    Mesh(InMemoryStore(), ledger=given).dispose()
    assert given.record(intent())  # still the caller's, still open
    given.close()
