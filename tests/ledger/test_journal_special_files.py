"""What is not a regular file of ours is never read: a load never blocks, it quarantines.

A FIFO under a journal file's name used to make ``PendingWriteLedger(dir)`` block for ever in
``os.open``. Every construction here runs in a thread with a bounded wait; if it blocks, the test
opens the FIFO's other end so the thread finishes, and fails.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rxmesh.ledger import PendingWriteLedger
from rxmesh.ledger._journal import journal_file_name
from tests.helpers import LogRecords
from tests.ledger._fakes import make_intent

BOUND = 10.0  # seconds; a load of a few files takes milliseconds

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")


def _unblock(fifo: Path) -> None:
    """Open ``fifo``'s write end (and close it): a reader blocked in ``open`` goes on, to EOF."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno not in (errno.ENXIO, errno.ENOENT):
            raise  # ENXIO: no reader is blocked on it; ENOENT: it is gone. Nothing to unblock.


def _load_within_bound(directory: Path, fifos: tuple[Path, ...] = ()) -> PendingWriteLedger:
    """``PendingWriteLedger(directory)`` in a thread; fail (after unblocking it) if it blocks."""
    built: list[PendingWriteLedger] = []
    raised: list[BaseException] = []

    def construct() -> None:
        try:
            built.append(PendingWriteLedger(directory))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=construct, name="journal-load", daemon=True)
    thread.start()
    thread.join(BOUND)
    if thread.is_alive():
        for fifo in fifos:
            _unblock(fifo)
        thread.join(BOUND)
        pytest.fail(f"loading the journal blocked for more than {BOUND}s (on a FIFO?)")
    if raised:
        raise raised[0]
    return built[0]


@pytest.fixture
def with_good_intent(journal_dir: Path) -> Path:
    """A journal holding one valid intent, for ``acme/good``."""
    PendingWriteLedger(journal_dir).record(make_intent("acme/good"))
    return journal_dir


@pytest.fixture
def opened_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The base name of every path ``os.open`` is asked to open while the test runs."""
    names: list[str] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        names.append(os.path.basename(os.fspath(path)))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    yield names
    monkeypatch.undo()


def test_a_fifo_named_like_a_journal_file_is_quarantined_without_blocking(
    with_good_intent: Path, log_records: LogRecords
) -> None:
    """FAILS against the old code: its load blocked in ``os.open`` on the FIFO, for ever."""
    fifo = with_good_intent / journal_file_name("acme/fifo")
    os.mkfifo(fifo, 0o600)

    ledger = _load_within_bound(with_good_intent, fifos=(fifo,))

    assert [i.path for i in ledger.pending()] == ["acme/good"]  # the others still load
    assert ledger.statistics().quarantined == 1
    assert not os.path.lexists(fifo)
    assert stat.S_ISFIFO(os.lstat(with_good_intent / f"{fifo.name}.corrupt").st_mode)
    (error,) = log_records.messages("ERROR")
    assert fifo.name in error
    assert "FIFO" in error


def _fifo(path: Path) -> Callable[[], None]:
    os.mkfifo(path, 0o600)
    return lambda: None


def _directory(path: Path) -> Callable[[], None]:
    path.mkdir(mode=0o700)
    return lambda: None


def _symlink_to_a_fifo(path: Path) -> Callable[[], None]:
    target = path.parent.parent / "elsewhere.fifo"
    os.mkfifo(target, 0o600)
    path.symlink_to(target)
    return lambda: None


def _character_device(path: Path) -> Callable[[], None]:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # what /dev/null is
    except PermissionError:
        pytest.skip("this process may not create device nodes")
    return lambda: None


def _socket(path: Path) -> Callable[[], None]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.getcwd()
    os.chdir(path.parent)  # a socket's path must be short; bind it relative to its directory
    try:
        server.bind(path.name)
    finally:
        os.chdir(here)
    return server.close


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (_fifo, "FIFO"),
        (_directory, "directory"),
        (_symlink_to_a_fifo, "symlink"),
        (_character_device, "character device"),
        (_socket, "socket"),
    ],
    ids=["fifo", "directory", "symlink", "device", "socket"],
)
def test_a_journal_name_that_is_not_a_regular_file_is_quarantined_without_being_opened(
    with_good_intent: Path,
    log_records: LogRecords,
    opened_names: list[str],
    make: Callable[[Path], Callable[[], None]],
    kind: str,
) -> None:
    """FAILS against the old code, which opened each before looking (a FIFO blocked; a device
    can act on open); this journal ``lstat``s first and opens regular files only."""
    odd = with_good_intent / journal_file_name("acme/odd")
    cleanup = make(odd)
    try:
        ledger = _load_within_bound(
            with_good_intent, fifos=(odd, odd.parent.parent / "elsewhere.fifo")
        )
    finally:
        cleanup()

    assert odd.name not in opened_names
    assert journal_file_name("acme/good") in opened_names  # negative control: it was read
    assert [i.path for i in ledger.pending()] == ["acme/good"]
    assert os.path.lexists(with_good_intent / f"{odd.name}.corrupt")
    (error,) = log_records.messages("ERROR")
    assert odd.name in error
    assert f"not a regular file but a {kind}" in error


def test_a_fifo_named_like_a_temp_file_is_removed_without_blocking(
    with_good_intent: Path, opened_names: list[str]
) -> None:
    """A guard (the old code passes it too): leftover temp files are unlinked, never opened."""
    leftover = with_good_intent / f".{journal_file_name('acme/lost')}.4242.0.tmp"
    os.mkfifo(leftover, 0o600)

    ledger = _load_within_bound(with_good_intent, fifos=(leftover,))

    assert [i.path for i in ledger.pending()] == ["acme/good"]
    assert not os.path.lexists(leftover)
    assert leftover.name not in opened_names


@needs_root
def test_a_journal_file_owned_by_another_uid_is_quarantined_unread(
    with_good_intent: Path, log_records: LogRecords, opened_names: list[str]
) -> None:
    """A guard of the ownership rule (the old code quarantined it too); only the "never opened"
    assertion FAILS against the old code, which opened the file before looking."""
    PendingWriteLedger(with_good_intent).record(make_intent("acme/foreign"))
    foreign = with_good_intent / journal_file_name("acme/foreign")
    os.chown(foreign, 12345, 12345)
    opened_names.clear()

    ledger = _load_within_bound(with_good_intent)

    assert foreign.name not in opened_names
    assert [i.path for i in ledger.pending()] == ["acme/good"]
    (error,) = log_records.messages("ERROR")
    assert "owned by uid 12345" in error
