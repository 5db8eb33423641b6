"""The journal's durability mechanics: written before record returns, private, hashed, replaced."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from rxmesh.exceptions import JournalError, RxMeshError
from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.operations import Verdict
from tests.ledger._fakes import make_intent


def _journal_files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_the_journal_file_is_fsynced_replaced_and_its_directory_fsynced_before_record_returns(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(
        source: str | os.PathLike[str], target: str | os.PathLike[str], **dir_fds: int
    ) -> None:
        events.append(("replace", f"{Path(source).name}->{Path(target).name}"))
        # Relative to the directory the journal holds open, not through a path.
        assert {os.readlink(f"/proc/self/fd/{fd}") for fd in dir_fds.values()} == {str(journal_dir)}
        real_replace(source, target, **dir_fds)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    intent = make_intent()

    assert ledger.record(intent) is True
    monkeypatch.undo()

    final = ledger.journal_file(intent.path)
    assert final is not None
    assert final.exists()  # the file is there as soon as record returns
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"]
    temp_name = events[1][1].split("->")[0]
    assert events[0][1].endswith(temp_name)  # the temp file itself was fsynced...
    assert temp_name.endswith(".tmp")
    assert Path(events[0][1]).parent == final.parent  # ...in the same directory
    assert events[1][1].endswith(f"->{final.name}")
    assert events[2][1] == str(final.parent)  # then the directory


def test_journal_files_are_0600_in_a_0700_directory_created_when_missing(tmp_path: Path) -> None:
    directory = tmp_path / "not" / "there" / "yet"
    ledger = PendingWriteLedger(directory)
    ledger.record(make_intent())

    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    (name,) = _journal_files(directory)
    assert stat.S_IMODE(os.stat(directory / name).st_mode) == 0o600


def test_the_file_name_is_a_hash_of_the_path_never_the_path(journal_dir: Path) -> None:
    intent = make_intent("acme/secret-project/plan")
    PendingWriteLedger(journal_dir).record(intent)

    (name,) = _journal_files(journal_dir)
    assert name == hashlib.sha256(b"acme/secret-project/plan").hexdigest() + ".json"
    assert "secret" not in name


def test_the_file_carries_the_intent_and_a_checksum_of_its_canonical_body(
    journal_dir: Path,
) -> None:
    intent = make_intent()
    PendingWriteLedger(journal_dir).record(intent)

    (name,) = _journal_files(journal_dir)
    document = json.loads((journal_dir / name).read_text())
    canonical = json.dumps(document["intent"], sort_keys=True, separators=(",", ":"))
    assert document["sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert document["intent"]["request_id"] == "req-1"
    assert document["intent"]["access"] == {"user": "alice", "on_behalf_of": "svc-import"}


def test_a_second_record_for_the_same_path_replaces_the_first_file_and_intent(
    journal_dir: Path,
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent(request_id="first"))
    ledger.record(make_intent(request_id="second"))

    (name,) = _journal_files(journal_dir)  # one file, no temp file left behind
    assert json.loads((journal_dir / name).read_text())["intent"]["request_id"] == "second"
    assert [i.request_id for i in ledger.pending()] == ["second"]
    statistics = ledger.statistics()
    assert (statistics.recorded, statistics.replaced, statistics.pending) == (2, 1, 1)


def test_records_for_different_paths_keep_one_file_each(journal_dir: Path) -> None:
    # Negative control of the replacement: different paths never replace each other.
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent("acme/a"))
    ledger.record(make_intent("acme/b"))

    assert len(_journal_files(journal_dir)) == 2
    assert ledger.statistics().replaced == 0


def test_recording_the_same_intent_twice_writes_it_once(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    intent = make_intent()

    assert ledger.record(intent) is True
    assert ledger.record(intent) is False
    assert ledger.statistics().recorded == 1


def test_settle_deletes_the_file_and_fsyncs_the_directory(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    intent = make_intent()
    ledger.record(intent)
    (taken,) = ledger.take_all()
    assert len(_journal_files(journal_dir)) == 1  # taken is not settled: the file stays
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    ledger.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))

    assert _journal_files(journal_dir) == []
    assert synced == [str(journal_dir)]


def test_a_journal_write_that_fails_raises_and_records_nothing(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = PendingWriteLedger(journal_dir)

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(JournalError, match="could not write") as caught:
        ledger.record(make_intent())
    monkeypatch.undo()

    assert isinstance(caught.value, RxMeshError)
    assert isinstance(caught.value.__cause__, OSError)
    assert ledger.pending() == ()
    assert ledger.statistics().recorded == 0
    assert _journal_files(journal_dir) == []  # the temp file was cleaned up


def test_without_a_journal_intents_live_in_memory(tmp_path: Path) -> None:
    ledger = PendingWriteLedger()
    ledger.record(make_intent())

    assert ledger.journal_dir is None
    assert ledger.journal_file("acme/docs/readme") is None
    assert [i.path for i in ledger.pending()] == ["acme/docs/readme"]
    assert ledger.statistics().journal_dir is None


def test_an_intent_the_journal_cannot_encode_is_a_journal_error_and_not_recorded(
    tmp_path: Path,
) -> None:
    """A value that is not valid Unicode (a lone surrogate, let in by a model built without
    validation) cannot be written as UTF-8: the record fails as a JournalError (the mesh's arm
    then says it will not be re-issued), never a bare UnicodeEncodeError, and nothing is left."""
    from rxmesh import AccessContext

    ledger = PendingWriteLedger(tmp_path / "journal")
    hostile = AccessContext.model_construct(user="alice", on_behalf_of="x\ud800")
    intent = make_intent().model_copy(update={"access": hostile})
    with pytest.raises(JournalError) as caught:
        ledger.record(intent)
    assert isinstance(caught.value.__cause__, UnicodeEncodeError)
    assert ledger.pending() == ()
    assert list((tmp_path / "journal").iterdir()) == []
