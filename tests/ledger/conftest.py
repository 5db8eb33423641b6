"""Fixtures of the ledger tests: a private journal directory, and every ledger closed after."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rxmesh.ledger import JOURNAL_DIR_ENV, PendingWriteLedger


@pytest.fixture(autouse=True)
def _no_journal_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment must not decide where a test's ledger lives."""
    monkeypatch.delenv(JOURNAL_DIR_ENV, raising=False)


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    """A journal directory that does not exist yet (the ledger creates it 0700)."""
    return tmp_path / "journal"


@pytest.fixture(autouse=True)
def _no_writer_thread_left() -> Iterator[None]:
    """Every test closes the journaled ledgers whose writer thread it started (a thread an
    earlier test module left to end by itself is not this test's)."""
    before = set(threading.enumerate())
    yield
    left = [
        t.name
        for t in threading.enumerate()
        if t.name == "rxmesh-journal-writer" and t not in before
    ]
    assert left == [], "a journal writer thread outlived its test: close the ledger"


@pytest.fixture(autouse=True)
def _close_ledgers(
    monkeypatch: pytest.MonkeyPatch, _no_writer_thread_left: None
) -> Iterator[None]:
    """Close, after the test, every ledger it made and left open: a synchronous ``record`` of a
    journaled ledger starts its writer thread too (its durable step is bounded), and a test
    that only records and reads back need not close its ledger by hand. Torn down before
    :func:`_no_writer_thread_left` checks that no writer thread is left."""
    made: weakref.WeakSet[PendingWriteLedger] = weakref.WeakSet()  # a collected one is gone
    init = PendingWriteLedger.__init__

    def tracked(self: PendingWriteLedger, *args: Any, **kwargs: Any) -> None:
        made.add(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(PendingWriteLedger, "__init__", tracked)
    yield
    for ledger in list(made):
        ledger.close()
