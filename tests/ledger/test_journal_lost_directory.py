"""A journal whose directory was deleted or moved away records nothing (issue 31 item 5).

The journal holds its directory open, so after ``rm -rf`` (or a rename) of it every write there
still succeeds and ``fdatasync`` still returns; yet the next process, opening the path, never
sees them. A durable step counts only once the directory held open is still the directory at
the path (``fstat`` of the descriptor: ``st_nlink == 0`` means deleted; its ``st_dev``/``st_ino``
against a fresh ``stat`` of the path). Otherwise the record is NOT recorded, logged at ERROR, and
health says why. Real directories, a real ``rm -rf`` (``shutil.rmtree``) and a real rename.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rxmesh.exceptions import JournalError
from rxmesh.health import HealthStatus, PendingWritesCheck
from rxmesh.ledger import PendingWriteLedger
from tests.helpers import LogRecords
from tests.ledger._fakes import make_intent


def _reloaded(journal_dir: Path) -> list[str]:
    """What a new ledger over ``journal_dir`` (a new process) finds."""
    ledger = PendingWriteLedger(journal_dir)
    try:
        return sorted(intent.path for intent in ledger.pending())
    finally:
        ledger.close()


async def test_a_deleted_journal_answers_not_recorded_and_says_so_in_health(
    journal_dir: Path, log_records: LogRecords
) -> None:
    """Fails at 1d389e8 because record_durably returned True (durable, in a deleted directory)
    and the new ledger over the path found nothing."""
    ledger = PendingWriteLedger(journal_dir)
    assert await ledger.record_durably(make_intent("acme/before", request_id="r0")) is True
    shutil.rmtree(journal_dir)

    with pytest.raises(JournalError, match="was deleted"):
        await ledger.record_durably(make_intent("acme/after", request_id="r1"))

    assert [i.path for i in ledger.pending()] == ["acme/before"]  # only what was recorded
    errors = log_records.messages("ERROR")
    assert any("was deleted" in text and "NOT recorded" in text for text in errors)
    health = PendingWritesCheck(ledger)()
    assert health.status is HealthStatus.UNHEALTHY
    assert "was deleted" in health.description
    assert "NOT recorded" in health.description
    assert ledger.statistics().journal_lost is True
    ledger.close()
    assert _reloaded(journal_dir) == []  # the path is empty: nothing was promised to it


async def test_a_renamed_journal_answers_not_recorded_and_strands_nothing(
    journal_dir: Path,
) -> None:
    """Fails at 1d389e8 because the intent was answered recorded and sat under the old name;
    now it is NOT recorded, and the moved directory, moved back, does not re-issue it."""
    ledger = PendingWriteLedger(journal_dir)
    assert await ledger.record_durably(make_intent("acme/before", request_id="r0")) is True
    moved = journal_dir.with_name("journal.old")
    os.rename(journal_dir, moved)

    with pytest.raises(JournalError, match="moved away"):
        await ledger.record_durably(make_intent("acme/after", request_id="r1"))

    health = PendingWritesCheck(ledger)()
    assert health.status is HealthStatus.UNHEALTHY
    assert "moved away" in health.description
    ledger.close()
    assert _reloaded(moved) == ["acme/before"]  # moved back or copied: only what was recorded


async def test_a_bulk_into_a_deleted_journal_records_none_of_its_nodes(journal_dir: Path) -> None:
    """Fails at 1d389e8 because every node of the bulk was answered recorded (appended to the
    segment already open in the deleted directory)."""
    ledger = PendingWriteLedger(journal_dir)
    try:
        assert await ledger.record_durably(make_intent("acme/before", request_id="r0")) is True
        shutil.rmtree(journal_dir)
        intents = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(20)]

        results = await ledger.record_many_durably(intents)

        assert all(isinstance(r, JournalError) and "was deleted" in str(r) for r in results)
        assert [i.path for i in ledger.pending()] == ["acme/before"]
    finally:
        ledger.close()


def test_a_synchronous_record_into_a_deleted_journal_is_not_recorded(journal_dir: Path) -> None:
    """At 1d389e8 this record was refused too (a deleted directory takes no new file), but for
    a reason that named a missing temp file, not the deleted journal, and nothing said so in
    the ledger's statistics: fails there on the message."""
    ledger = PendingWriteLedger(journal_dir)
    try:
        shutil.rmtree(journal_dir)
        with pytest.raises(JournalError, match="was deleted"):
            ledger.record(make_intent())
        assert ledger.pending() == ()
        assert ledger.statistics().journal_fault is not None
    finally:
        ledger.close()


def test_a_directory_replaced_by_a_copy_of_itself_is_not_the_journal_any_more(
    journal_dir: Path,
) -> None:
    """The copy has the same name and contents but is another directory: what the held one
    receives would not be in it. Fails at 1d389e8 (recorded into the moved original)."""
    ledger = PendingWriteLedger(journal_dir)
    try:
        ledger.record(make_intent("acme/before", request_id="r0"))
        moved = journal_dir.with_name("journal.old")
        journal_dir.rename(moved)
        shutil.copytree(moved, journal_dir)

        with pytest.raises(JournalError, match="moved away or replaced"):
            ledger.record(make_intent("acme/after", request_id="r1"))
    finally:
        ledger.close()
    assert _reloaded(journal_dir) == ["acme/before"]


# -- negative controls ----------------------------------------------------------------------------


async def test_an_intact_journal_still_records_and_is_healthy(journal_dir: Path) -> None:
    """The negative control: the directory is where its path says; the intent is recorded and
    a new ledger over the path finds it."""
    ledger = PendingWriteLedger(journal_dir)
    assert await ledger.record_durably(make_intent("acme/a", request_id="r1")) is True
    assert ledger.record(make_intent("acme/b", request_id="r2")) is True
    results = await ledger.record_many_durably([make_intent("acme/c", request_id="r3")])
    assert results == [True]
    stats = ledger.statistics()
    assert stats.journal_fault is None
    assert stats.journal_lost is False
    assert PendingWritesCheck(ledger)().status is HealthStatus.DEGRADED  # 3 waiting, no fault
    ledger.close()
    assert _reloaded(journal_dir) == ["acme/a", "acme/b", "acme/c"]


async def test_a_journal_reached_through_a_symlink_is_intact(tmp_path: Path) -> None:
    """The path is compared as resolved at construction: a symlink to the journal is no loss."""
    real = tmp_path / "real"
    link = tmp_path / "link"
    real.mkdir(mode=0o700)
    link.symlink_to(real)
    ledger = PendingWriteLedger(link)
    assert await ledger.record_durably(make_intent()) is True
    assert ledger.statistics().journal_fault is None
    ledger.close()
    assert _reloaded(real) == ["acme/docs/readme"]
