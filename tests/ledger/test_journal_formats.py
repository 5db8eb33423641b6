"""The journal's two formats: format 1 (one file per intent, today's and older journals) and the
log of format 2. An old journal still loads; a torn or edited log entry is handled like a torn or
edited file; a path is never held in both formats for long."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome
from rxmesh.ledger._journal import Journal, encode_journal_file, journal_file_name
from rxmesh.ledger._log import LOG_FORMAT, Log, encode_del, encode_put, segment_name
from rxmesh.model import AccessContext, MeshNode
from rxmesh.operations import Verdict
from tests.helpers import ROOT, LogRecords
from tests.ledger._fakes import make_intent

FIXTURES = Path(__file__).with_name("fixtures") / "v1-journal"


def _old_journal(journal_dir: Path) -> Path:
    """The fixture journal, written by the one-file-per-intent code before the log existed."""
    journal_dir.mkdir(mode=0o700)
    for source in sorted(FIXTURES.iterdir()):
        target = journal_dir / source.name
        shutil.copyfile(source, target)
        os.chmod(target, 0o600)
    return journal_dir


def _segments(journal_dir: Path) -> list[Path]:
    return sorted(journal_dir.glob("segment-*.log"))


def _names(journal_dir: Path, pattern: str = "*") -> list[str]:
    return sorted(p.name for p in journal_dir.glob(pattern))


def _append(segment: Path, data: bytes) -> None:
    with open(segment, "ab") as handle:
        handle.write(data)


async def _logged(journal_dir: Path, *paths: str) -> Path:
    """A journal whose intents for ``paths`` are in the log; return its one segment."""
    ledger = PendingWriteLedger(journal_dir)
    try:
        for index, path in enumerate(paths):
            await ledger.record_durably(make_intent(path, request_id=f"r{index}"))
    finally:
        ledger.close()
    (segment,) = _segments(journal_dir)
    return segment


def test_a_journal_written_by_the_format_1_code_loads_unchanged(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(_old_journal(journal_dir))
    try:
        first, second = ledger.pending()
        assert (first.path, first.request_id, first.origin) == (
            "acme/docs/readme",
            "req-v1-create",
            "create",
        )
        assert first.access == AccessContext(user="alice", on_behalf_of="svc-import")
        assert first.recorded_at == datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
        assert first.node.content == {"title": "Read me", "tags": ["a", "b"]}
        assert (second.path, second.origin, second.requester) == (
            "acme/bulk/n0001",
            "create_nodes",
            "bob",
        )
        assert second.node.content == {"n": 1, "name": "Ünïcødé ✓"}
        assert ledger.statistics().quarantined == 0
    finally:
        ledger.close()


def test_the_fixture_is_byte_for_byte_what_the_format_1_encoder_writes(journal_dir: Path) -> None:
    # Negative control of the fixture test: the reader is not merely lenient, the bytes match.
    ledger = PendingWriteLedger(_old_journal(journal_dir))
    try:
        for intent in ledger.pending():
            fixture = FIXTURES / journal_file_name(intent.path)
            assert fixture.read_bytes() == encode_journal_file(intent)
    finally:
        ledger.close()


async def test_an_old_intent_replaced_through_the_awaitable_api_stays_in_its_own_file(
    journal_dir: Path,
) -> None:
    ledger = PendingWriteLedger(_old_journal(journal_dir))
    replacement = make_intent("acme/docs/readme", request_id="req-new")
    try:
        assert await ledger.record_durably(replacement) is True
        assert _segments(journal_dir) == []  # one copy per path: in its format-1 file
        (taken, *_) = [i for i in ledger.take_all() if i.path == "acme/bulk/n0001"]
        ledger.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
    finally:
        ledger.close()
    assert _names(journal_dir) == [journal_file_name("acme/docs/readme")]
    restarted = PendingWriteLedger(journal_dir)
    try:
        assert [i.request_id for i in restarted.pending()] == ["req-new"]
    finally:
        restarted.close()


async def test_segments_are_0600_and_start_with_their_format(journal_dir: Path) -> None:
    segment = await _logged(journal_dir, "acme/a")
    assert stat.S_IMODE(os.stat(segment).st_mode) == 0o600
    assert (
        segment.read_bytes().split(b"\n", 1)[0]
        == json.dumps({"format": LOG_FORMAT}, separators=(",", ":")).encode()
    )
    assert b"acme/a" in segment.read_bytes()
    assert _names(journal_dir, "*.json") == []


async def test_a_torn_last_entry_is_dropped_with_a_warning_not_quarantined(
    journal_dir: Path, log_records: LogRecords
) -> None:
    """What SIGKILL or a power cut leaves mid-write: a group nobody was told was recorded."""
    segment = await _logged(journal_dir, "acme/a", "acme/b")
    _append(segment, encode_put(make_intent("acme/torn", request_id="t"))[:-40])

    ledger = PendingWriteLedger(journal_dir)
    try:
        assert [i.path for i in ledger.pending()] == ["acme/a", "acme/b"]
        assert ledger.statistics().quarantined == 0
    finally:
        ledger.close()
    assert log_records.messages("ERROR") == []
    assert any("without its newline" in w for w in log_records.messages("WARNING"))


async def test_an_edited_entry_is_quarantined_at_error_and_the_others_still_load(
    journal_dir: Path, log_records: LogRecords
) -> None:
    segment = await _logged(journal_dir, "acme/a", "acme/b", "acme/c")
    data = segment.read_bytes()
    edited = data.replace(b'"user":"alice","on_behalf_of"', b'"user":"mallo","on_behalf_of"', 2)
    assert edited != data
    segment.write_bytes(edited)

    ledger = PendingWriteLedger(journal_dir)
    try:
        loaded = [i.path for i in ledger.pending()]
        assert ledger.statistics().quarantined == 2
    finally:
        ledger.close()
    assert loaded == ["acme/c"]  # the first two entries were edited (one access each)
    errors = log_records.messages("ERROR")
    assert len(errors) == 2
    assert all("checksum" in e for e in errors)
    (aside,) = [journal_dir / name for name in _names(journal_dir, "*.lines.corrupt")]
    assert aside.read_bytes().count(b"\n") == 2
    assert b"mallo" in aside.read_bytes()


async def test_intact_segments_are_never_quarantined(
    journal_dir: Path, log_records: LogRecords
) -> None:
    # Negative control of the quarantine: a clean log loads whole, twice, with no ERROR.
    await _logged(journal_dir, "acme/a", "acme/b")
    for _ in range(2):
        ledger = PendingWriteLedger(journal_dir)
        try:
            assert len(ledger.pending()) == 2
            assert ledger.statistics().quarantined == 0
        finally:
            ledger.close()
    assert log_records.messages("ERROR") == []
    assert _names(journal_dir, "*.corrupt") == []
    assert len(_segments(journal_dir)) == 1  # each load replaced the log by one snapshot


@pytest.mark.parametrize(
    "header", [b"", b"garbage\n", b'{"format":"rxmesh.pending-write-log/9"}\n'], ids=str
)
async def test_a_segment_of_an_unknown_format_is_moved_aside_whole(
    journal_dir: Path, log_records: LogRecords, header: bytes
) -> None:
    await _logged(journal_dir, "acme/good")
    alien = journal_dir / segment_name(99)
    alien.write_bytes(header + encode_put(make_intent("acme/alien")))
    alien.chmod(0o600)

    ledger = PendingWriteLedger(journal_dir)
    try:
        assert [i.path for i in ledger.pending()] == ["acme/good"]
        assert ledger.statistics().quarantined == 1
    finally:
        ledger.close()
    assert (journal_dir / f"{alien.name}.corrupt").exists()
    (error,) = log_records.messages("ERROR")
    assert alien.name in error


def test_a_fifo_named_like_a_segment_is_quarantined_without_being_opened(
    journal_dir: Path, log_records: LogRecords
) -> None:
    PendingWriteLedger(journal_dir).close()
    fifo = journal_dir / segment_name(7)
    os.mkfifo(fifo, 0o600)
    ledger = PendingWriteLedger(journal_dir)  # would block for ever in open() on the FIFO
    try:
        assert ledger.statistics().quarantined == 1
    finally:
        ledger.close()
    assert stat.S_ISFIFO(os.lstat(journal_dir / f"{fifo.name}.corrupt").st_mode)
    assert "FIFO" in log_records.messages("ERROR")[0]


@pytest.mark.parametrize("newer", ["file", "log"])
async def test_a_path_left_in_both_formats_by_a_crash_keeps_the_newer_intent(
    journal_dir: Path, newer: str
) -> None:
    now = datetime.now(UTC)
    in_file = make_intent("acme/both", request_id="file").model_copy(
        update={"recorded_at": now + timedelta(seconds=1 if newer == "file" else -1)}
    )
    in_log = make_intent("acme/both", request_id="log").model_copy(update={"recorded_at": now})
    await _logged(journal_dir, "acme/other")
    segment = _segments(journal_dir)[0]
    _append(segment, encode_put(in_log))
    file = journal_dir / journal_file_name("acme/both")
    file.write_bytes(encode_journal_file(in_file))
    file.chmod(0o600)

    ledger = PendingWriteLedger(journal_dir)
    try:
        assert {i.path: i.request_id for i in ledger.pending()} == {
            "acme/both": newer,
            "acme/other": "r0",
        }
    finally:
        ledger.close()
    assert file.exists() == (newer == "file")  # the loser's copy is gone
    restarted = PendingWriteLedger(journal_dir)
    try:
        assert {i.path: i.request_id for i in restarted.pending()}["acme/both"] == newer
    finally:
        restarted.close()


def test_a_grown_log_is_compacted_into_a_snapshot_with_the_same_intents(
    journal_dir: Path,
) -> None:
    journal = Journal(journal_dir)
    log = Log(journal, compact_at=4096)
    try:
        log.load()
        live = {f"acme/n{i}": make_intent(f"acme/n{i}", request_id=f"r{i}") for i in range(40)}
        for index, (path, intent) in enumerate(live.items()):
            log.append([(path, encode_put(intent), True)])
            if index % 2:
                log.append([(path, encode_del(path), False)])
        first = _segments(journal_dir)
        assert first and first[0].name != segment_name(1)  # compacted at least once
        assert len(first) == 1  # the superseded segments were deleted
    finally:
        log.close()
        journal.close()
    ledger = PendingWriteLedger(journal_dir)
    try:
        assert sorted(i.request_id for i in ledger.pending()) == sorted(
            f"r{i}" for i in range(0, 40, 2)
        )
    finally:
        ledger.close()


def test_intents_answered_before_sigkill_are_all_loaded_by_the_next_process(
    journal_dir: Path,
) -> None:
    """The awaitable path: 300 concurrent records; the process kills itself after 100 of them
    returned. Every one that returned is durable; what was mid-write is at most dropped."""
    code = textwrap.dedent(
        f"""
        import asyncio, os, signal, sys
        from rxmesh.ledger import PendingWrite, PendingWriteLedger
        from rxmesh.model import AccessContext, MeshNode

        async def main():
            ledger = PendingWriteLedger({str(journal_dir)!r})
            done = 0

            async def one(n):
                nonlocal done
                await ledger.record_durably(PendingWrite(
                    node=MeshNode(path=f"acme/kill/n{{n:04d}}", content={{"n": n}}),
                    requester="alice", access=AccessContext(user="alice"),
                    request_id=f"req-{{n}}",
                ))
                sys.stdout.write(f"acme/kill/n{{n:04d}}\\n")
                sys.stdout.flush()
                done += 1
                if done == 100:
                    os.kill(os.getpid(), signal.SIGKILL)

            await asyncio.gather(*(one(n) for n in range(300)))

        asyncio.run(main())
        """
    )
    process = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60, check=False
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()
    answered = set(process.stdout.decode().split())
    assert len(answered) >= 100

    ledger = PendingWriteLedger(journal_dir)
    try:
        loaded = {i.path for i in ledger.pending()}
        assert ledger.statistics().quarantined == 0
    finally:
        ledger.close()
    assert answered <= loaded
    assert all(path.startswith("acme/kill/n") for path in loaded)


def test_negative_control_a_record_never_made_is_not_loaded(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    ledger.close()
    restarted = PendingWriteLedger(journal_dir)
    try:
        assert restarted.pending() == ()
    finally:
        restarted.close()


def test_the_intent_round_trips_through_a_log_entry() -> None:
    intent = make_intent(content={"nested": {"é": [1, 2.5, None, True]}})
    journal_free = encode_put(intent)
    body = journal_free.decode().split(" ", 1)[1]
    assert json.loads(body)["op"] == "put"
    assert MeshNode.model_validate(json.loads(body)["intent"]["node"]) == intent.node
