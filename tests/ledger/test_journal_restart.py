"""Intents survive a restart and a crash; an untrustworthy file is quarantined, the rest load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.ledger._journal import journal_file_name
from rxmesh.operations import Verdict
from tests.helpers import ALICE, ROOT, LogRecords
from tests.ledger._fakes import make_intent


def test_a_new_ledger_over_the_same_journal_loads_the_intent(journal_dir: Path) -> None:
    intent = make_intent()
    PendingWriteLedger(journal_dir).record(intent)

    restarted = PendingWriteLedger(journal_dir)

    assert restarted.pending() == (intent,)  # node, requester, access, request id, time: all kept
    assert restarted.statistics().loaded == 1


def test_an_intent_taken_but_not_settled_survives_a_restart(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    intent = make_intent()
    ledger.record(intent)
    ledger.take_all()  # the process dies here, before the verdict

    assert PendingWriteLedger(journal_dir).pending() == (intent,)


def test_a_settled_intent_is_not_loaded_again(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.record(make_intent())
    (taken,) = ledger.take_all()
    ledger.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))

    assert PendingWriteLedger(journal_dir).pending() == ()


def test_an_intent_recorded_just_before_sigkill_is_loaded_by_the_next_process(
    journal_dir: Path,
) -> None:
    code = textwrap.dedent(
        f"""
        import os, signal
        from rxmesh.ledger import PendingWrite, PendingWriteLedger
        from rxmesh.model import AccessContext, MeshNode
        ledger = PendingWriteLedger({str(journal_dir)!r})
        ledger.record(PendingWrite(
            node=MeshNode(path="acme/crash/doc", content={{"n": 1}}),
            requester="alice",
            access=AccessContext(user="alice"),
            request_id="req-crash",
        ))
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    process = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60, check=False
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()

    (intent,) = PendingWriteLedger(journal_dir).pending()
    assert intent.path == "acme/crash/doc"
    assert intent.request_id == "req-crash"
    assert intent.access == ALICE


def test_a_torn_file_is_quarantined_reported_at_error_and_the_others_still_load(
    journal_dir: Path, log_records: LogRecords
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    for path in ("acme/a", "acme/b", "acme/c"):
        ledger.record(make_intent(path, request_id=f"req-{path[-1]}"))
    torn = journal_dir / journal_file_name("acme/b")
    data = torn.read_bytes()
    torn.write_bytes(data[: len(data) // 2])

    restarted = PendingWriteLedger(journal_dir)

    assert [i.path for i in restarted.pending()] == ["acme/a", "acme/c"]
    assert not torn.exists()
    assert (journal_dir / f"{torn.name}.corrupt").read_bytes() == data[: len(data) // 2]
    (error,) = log_records.messages("ERROR")
    assert torn.name in error
    assert "torn" in error
    assert restarted.statistics().quarantined == 1


def test_an_edited_file_fails_its_checksum_and_is_quarantined(
    journal_dir: Path, log_records: LogRecords
) -> None:
    PendingWriteLedger(journal_dir).record(make_intent())
    target = journal_dir / journal_file_name("acme/docs/readme")
    document = json.loads(target.read_text())
    document["intent"]["access"]["user"] = "mallory"  # valid JSON, valid intent, wrong checksum
    target.write_text(json.dumps(document))

    assert PendingWriteLedger(journal_dir).pending() == ()
    (error,) = log_records.messages("ERROR")
    assert target.name in error
    assert "checksum" in error


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe garbage", "not JSON"),
        (b"[1, 2]", "not a journal document"),
        (b'{"format": "something-else/9", "sha256": "", "intent": {}}', "unknown format"),
    ],
)
def test_an_unreadable_or_invalid_file_is_quarantined(
    journal_dir: Path, log_records: LogRecords, content: bytes, why: str
) -> None:
    PendingWriteLedger(journal_dir).record(make_intent("acme/good"))
    bad = journal_dir / journal_file_name("acme/bad")
    bad.write_bytes(content)

    ledger = PendingWriteLedger(journal_dir)

    assert [i.path for i in ledger.pending()] == ["acme/good"]
    (error,) = log_records.messages("ERROR")
    assert bad.name in error
    assert why in error
    assert (journal_dir / f"{bad.name}.corrupt").exists()


def test_a_file_renamed_to_another_paths_hash_is_quarantined(
    journal_dir: Path, log_records: LogRecords
) -> None:
    PendingWriteLedger(journal_dir).record(make_intent("acme/one"))
    os.rename(
        journal_dir / journal_file_name("acme/one"), journal_dir / journal_file_name("acme/two")
    )

    assert PendingWriteLedger(journal_dir).pending() == ()
    (error,) = log_records.messages("ERROR")
    assert "does not match" in error


def test_a_symlink_in_the_journal_is_quarantined_not_followed(
    journal_dir: Path, tmp_path: Path, log_records: LogRecords
) -> None:
    PendingWriteLedger(journal_dir).record(make_intent("acme/one"))
    elsewhere = tmp_path / "elsewhere.json"
    (journal_dir / journal_file_name("acme/one")).rename(elsewhere)
    os.symlink(elsewhere, journal_dir / journal_file_name("acme/one"))

    assert PendingWriteLedger(journal_dir).pending() == ()
    assert len(log_records.messages("ERROR")) == 1
    assert elsewhere.exists()  # the target is left alone


def test_intact_files_are_never_quarantined(
    journal_dir: Path, log_records: LogRecords
) -> None:
    # Negative control of the quarantine: good files load, no ERROR, nothing moved aside.
    ledger = PendingWriteLedger(journal_dir)
    for path in ("acme/a", "acme/b"):
        ledger.record(make_intent(path, request_id=path))

    restarted = PendingWriteLedger(journal_dir)

    assert len(restarted.pending()) == 2
    assert log_records.messages("ERROR") == []
    assert not any(name.endswith(".corrupt") for name in os.listdir(journal_dir))


def test_a_second_quarantine_of_the_same_name_keeps_the_first_corrupt_file(
    journal_dir: Path,
) -> None:
    PendingWriteLedger(journal_dir)
    bad = journal_dir / journal_file_name("acme/bad")
    bad.write_bytes(b"first")
    PendingWriteLedger(journal_dir)
    bad.write_bytes(b"second")
    PendingWriteLedger(journal_dir)

    assert (journal_dir / f"{bad.name}.corrupt").read_bytes() == b"first"
    assert (journal_dir / f"{bad.name}.1.corrupt").read_bytes() == b"second"


def test_a_temp_file_of_a_write_that_never_completed_is_removed_not_loaded(
    journal_dir: Path,
) -> None:
    PendingWriteLedger(journal_dir).record(make_intent("acme/kept"))
    leftover = journal_dir / f".{journal_file_name('acme/lost')}.4242.0.tmp"
    leftover.write_bytes(b'{"half": ')

    ledger = PendingWriteLedger(journal_dir)

    assert [i.path for i in ledger.pending()] == ["acme/kept"]
    assert not leftover.exists()
