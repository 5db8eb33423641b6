"""The journal holds its directory open: a directory swapped in at its path never gets an intent.

Another user once renamed a journal directory away mid-run, put its own at the same path, received
the next intent and deleted it. Every journal operation is now relative to the descriptor opened
(and checked) at construction. The impostor is given to another uid when we are root.
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest

from rxmesh.exceptions import JournalError
from rxmesh.ledger import PendingWriteLedger
from rxmesh.ledger._journal import Journal, encode_journal_file, journal_file_name
from tests.ledger._blocking import BOUND
from tests.ledger._fakes import make_intent

OTHER_UID = 12345


def _swap(journal_dir: Path) -> tuple[Path, Path]:
    """Rename ``journal_dir`` away and put an impostor at its path; return (moved, impostor)."""
    moved = journal_dir.with_name("moved-away")
    journal_dir.rename(moved)
    journal_dir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(journal_dir, OTHER_UID, OTHER_UID)
    return moved, journal_dir


def _descriptors_on(directory: Path) -> int:
    """How many of this process's descriptors are open on ``directory``."""
    fds = Path("/proc/self/fd")
    count = 0
    for fd in os.listdir(fds):
        try:
            if os.readlink(fds / fd) == str(directory):
                count += 1
        except FileNotFoundError:
            continue  # the descriptor listdir itself used, closed since
    return count


def test_a_directory_swapped_in_at_the_journal_path_never_receives_an_intent(
    journal_dir: Path,
) -> None:
    """FAILS against an older code: it wrote through the path, into the impostor. The moved
    directory does not receive it either (no process opening the path would find it there): the
    intent is NOT recorded (tests/ledger/test_journal_lost_directory.py)."""
    ledger = PendingWriteLedger(journal_dir)
    moved, impostor = _swap(journal_dir)
    intent = make_intent()

    with pytest.raises(JournalError, match="moved away"):
        ledger.record(intent)

    assert os.listdir(impostor) == []
    assert os.listdir(moved) == []
    assert ledger.pending() == ()


def test_a_load_after_a_swap_reads_the_held_directory_not_the_impostor(journal_dir: Path) -> None:
    """FAILS against the old code: it listed and read through the path, so it loaded the forgery."""
    journal = Journal(journal_dir)
    journal.write(make_intent("acme/real"))
    moved, impostor = _swap(journal_dir)
    forged = make_intent("acme/forged", user="mallory")
    (impostor / journal_file_name(forged.path)).write_bytes(encode_journal_file(forged))
    os.chown(impostor / journal_file_name(forged.path), os.geteuid(), os.getegid())

    intents, quarantined = journal.load()

    assert [i.path for i in intents] == ["acme/real"]
    assert quarantined == 0
    assert (moved / journal_file_name("acme/real")).exists()
    journal.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the impostor to another uid needs root")
def test_the_next_process_refuses_the_impostor(journal_dir: Path) -> None:
    # The other half: a restart opens the path again, and the impostor is not ours.
    PendingWriteLedger(journal_dir)
    _swap(journal_dir)

    with pytest.raises(JournalError, match=f"owned by uid {OTHER_UID}"):
        PendingWriteLedger(journal_dir)


def test_without_a_swap_the_intent_is_where_the_path_says(journal_dir: Path) -> None:
    # Negative control of the swap tests: the held directory IS the one at the path.
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent())

    assert os.listdir(journal_dir) == [journal_file_name("acme/docs/readme")]


def test_close_releases_the_directory_and_later_operations_raise(journal_dir: Path) -> None:
    journal = Journal(journal_dir)
    assert _descriptors_on(journal_dir) == 1
    assert journal.closed is False

    journal.close()
    journal.close()  # idempotent

    assert journal.closed is True
    assert _descriptors_on(journal_dir) == 0
    for operation in (
        lambda: journal.write(make_intent()),
        lambda: journal.remove("acme/docs/readme"),
        journal.load,
    ):
        with pytest.raises(JournalError, match="is closed"):
            operation()
    assert os.listdir(journal_dir) == []


def test_a_journal_nobody_closes_releases_its_directory_when_collected(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent())
    assert _descriptors_on(journal_dir) == 1
    writers = [t for t in threading.enumerate() if t.name == "rxmesh-journal-writer"]

    del ledger
    for writer in writers:  # it ends after its linger without a ticket, and lets go of it
        writer.join(BOUND)
    gc.collect()

    assert _descriptors_on(journal_dir) == 0


def test_a_refused_directory_leaves_no_descriptor_open(journal_dir: Path) -> None:
    journal_dir.mkdir()
    os.chmod(journal_dir, 0o770)

    with pytest.raises(JournalError, match="group- or world-writable"):
        Journal(journal_dir)

    assert _descriptors_on(journal_dir) == 0
