"""Where the journal may live: a private directory, chosen by argument or environment."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rxmesh.exceptions import JournalError, RxMeshError
from rxmesh.ledger import JOURNAL_DIR_ENV, PendingWriteLedger
from tests.ledger._fakes import make_intent

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a directory to another uid needs root"
)


def _existing(tmp_path: Path, mode: int) -> Path:
    directory = tmp_path / "journal"
    directory.mkdir()
    os.chmod(directory, mode)
    return directory


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o730, 0o702, 0o1777])
def test_an_existing_group_or_world_writable_directory_is_refused(
    tmp_path: Path, mode: int
) -> None:
    directory = _existing(tmp_path, mode)

    with pytest.raises(JournalError, match="group- or world-writable") as caught:
        PendingWriteLedger(directory)
    assert isinstance(caught.value, RxMeshError)
    assert caught.value.path == str(directory)
    assert stat.S_IMODE(os.stat(directory).st_mode) == mode  # refused, not "fixed"


@needs_root
def test_an_existing_directory_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    directory = _existing(tmp_path, 0o700)
    os.chown(directory, 65534, 65534)

    with pytest.raises(JournalError, match="owned by uid 65534"):
        PendingWriteLedger(directory)


@pytest.mark.parametrize("mode", [0o700, 0o750, 0o755])
def test_an_existing_directory_owned_by_us_and_not_writable_by_others_is_accepted(
    tmp_path: Path, mode: int
) -> None:
    # Negative control of the refusal above.
    directory = _existing(tmp_path, mode)

    ledger = PendingWriteLedger(directory)
    ledger.record(make_intent())

    assert ledger.journal_dir == directory
    assert len(os.listdir(directory)) == 1


def test_a_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "a-file"
    target.write_text("")

    with pytest.raises(JournalError):
        PendingWriteLedger(target)


def test_the_environment_variable_names_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "from-env"
    monkeypatch.setenv(JOURNAL_DIR_ENV, str(directory))

    ledger = PendingWriteLedger()
    ledger.record(make_intent())

    assert ledger.journal_dir == directory
    assert PendingWriteLedger().pending() == ledger.pending()


def test_an_explicit_directory_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JOURNAL_DIR_ENV, str(tmp_path / "from-env"))

    ledger = PendingWriteLedger(tmp_path / "explicit")

    assert ledger.journal_dir == tmp_path / "explicit"
    assert not (tmp_path / "from-env").exists()


@pytest.mark.parametrize("value", [None, ""])
def test_without_a_directory_or_variable_the_ledger_is_in_memory(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is not None:
        monkeypatch.setenv(JOURNAL_DIR_ENV, value)

    assert PendingWriteLedger().journal_dir is None


def test_an_unsafe_directory_named_by_the_environment_is_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JOURNAL_DIR_ENV, str(_existing(tmp_path, 0o777)))

    with pytest.raises(JournalError):
        PendingWriteLedger()


def test_an_empty_directory_argument_means_in_memory_whatever_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JOURNAL_DIR_ENV, str(tmp_path / "from-env"))

    assert PendingWriteLedger("").journal_dir is None
    assert not (tmp_path / "from-env").exists()
