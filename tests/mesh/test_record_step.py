"""The recording step of a terminal arm can never prevent the answer (issue 13, scenario 2).

Whatever ``ledger.record`` raises — a journal that cannot encode a value, a full disk, a defect —
the create is still answered exactly once (UNAVAILABLE, saying the write will not be re-issued)
and the failure is logged at ERROR.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from reactivex import operators as ops

from rxmesh import CreateNodeRequest, CreateNodesRequest, RejectionReason
from rxmesh.aio import first_value
from rxmesh.exceptions import JournalError
from rxmesh.ledger import PendingWrite, PendingWriteLedger, RecordResult, read_journal
from tests.helpers import ALICE, LogRecords, doc

from .conftest import make_mesh


class BrokenLedger(PendingWriteLedger):
    """A ledger whose recording fails with whatever the test says."""

    def __init__(self, error: Exception) -> None:
        super().__init__("")
        self.error = error

    def record(self, intent: PendingWrite) -> bool:
        raise self.error

    async def record_durably(self, intent: PendingWrite) -> bool:
        raise self.error

    async def record_many_durably(self, intents: Iterable[PendingWrite]) -> list[RecordResult]:
        raise self.error


FAILURES = [
    UnicodeEncodeError("utf-8", "x\ud800", 1, 2, "surrogates not allowed"),
    JournalError("disk full", path="/journal"),
    OSError(28, "No space left on device"),
    RuntimeError("a defect in the ledger"),
]


@pytest.mark.parametrize("error", FAILURES, ids=lambda e: type(e).__name__)
async def test_a_failing_record_step_still_answers_once_and_says_so(
    error: Exception, log_records: LogRecords
) -> None:
    """FAILS against the old arm: for UnicodeEncodeError and RuntimeError (only OSError and
    JournalError were caught) the exception escaped the terminal arm and create_node never
    answered; for the other two the answer did not name what failed."""
    mesh, store = make_mesh(ledger=BrokenLedger(error))
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    answers = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("p/x"), access=ALICE)).pipe(ops.to_list()),
        timeout=5,
    )
    assert len(answers) == 1
    [answer] = answers
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert "will not be re-issued" in (answer.error or "")
    assert type(error).__name__ in (answer.error or "")
    failed = [r for r in log_records.at("ERROR") if r["extra"].get("event") == "journal_failed"]
    assert len(failed) == 1
    assert failed[0]["extra"]["path"] == "p/x"


async def test_a_failing_record_step_in_a_bulk_still_answers_once(log_records: LogRecords) -> None:
    mesh, store = make_mesh(ledger=BrokenLedger(RuntimeError("a defect in the ledger")))
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    answer = await first_value(
        mesh.create_nodes(CreateNodesRequest(nodes=(doc("p/a"), doc("p/b")), access=ALICE)),
        timeout=5,
    )
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert "will not be re-issued" in (answer.error or "")
    assert len(log_records.at("ERROR")) >= 2


async def test_negative_control_a_working_ledger_records_and_promises_a_reissue() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    answer = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("p/x"), access=ALICE)), timeout=5
    )
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert "will not be re-issued" not in (answer.error or "")
    assert [p.path for p in mesh.ledger.pending()] == ["p/x"]


class FillingLedger(PendingWriteLedger):
    """A journaled ledger on a disk that fills up after ``room`` intents."""

    def __init__(self, journal_dir: object, room: int) -> None:
        super().__init__(journal_dir)  # type: ignore[arg-type]
        self.room = room

    def _full(self, intent: PendingWrite) -> JournalError:
        return JournalError(
            f"could not write pending-write journal file for {intent.path!r}: "
            "[Errno 28] No space left on device",
            path=str(self.journal_dir),
        )

    def record(self, intent: PendingWrite) -> bool:
        if self.room <= 0:
            raise self._full(intent)
        self.room -= 1
        return super().record(intent)

    async def record_durably(self, intent: PendingWrite) -> bool:
        if self.room <= 0:
            raise self._full(intent)
        self.room -= 1
        return await super().record_durably(intent)

    async def record_many_durably(self, intents: Iterable[PendingWrite]) -> list[RecordResult]:
        """The first ``room`` intents fit; each one after them is refused as the disk is full."""
        every = list(intents)
        fits, left = every[: self.room], every[self.room :]
        self.room -= len(fits)
        results = await super().record_many_durably(fits)
        return [*results, *(self._full(intent) for intent in left)]


async def test_a_bulk_whose_journaling_partly_failed_says_which_nodes_were_recorded(
    tmp_path: Path, log_records: LogRecords
) -> None:
    """FAILS against the old arm: 16 of 300 journaled, and the answer said only "could NOT be
    journaled ... for 'p/b299'", with no way to tell the 16 that will be re-issued from the 284
    that will not."""
    ledger = FillingLedger(tmp_path / "journal", room=16)
    mesh, store = make_mesh(ledger=ledger)
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    nodes = tuple(doc(f"p/b{i:03}") for i in range(300))
    answer = await first_value(
        mesh.create_nodes(CreateNodesRequest(nodes=nodes, access=ALICE)), timeout=10
    )
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert answer.recorded_for_reissue == tuple(f"p/b{i:03}" for i in range(16))
    assert answer.not_recorded == tuple(f"p/b{i:03}" for i in range(16, 300))
    text = answer.error or ""
    assert "16 of the 300 node(s) not created were recorded" in text
    assert "284 could NOT be recorded and will not be re-issued" in text
    assert "No space left on device" in text
    assert "'p/b016'" in text
    assert sorted(p.path for p in ledger.pending()) == list(answer.recorded_for_reissue)
    assert len(read_journal(tmp_path / "journal")) == 16
    journal_errors = [
        r for r in log_records.at("ERROR") if r["extra"].get("event") == "journal_failed"
    ]
    assert len(journal_errors) == 2  # the first failure with its traceback, then one summary


async def test_negative_control_a_bulk_fully_recorded_lists_every_node_and_no_note(
    tmp_path: Path,
) -> None:
    mesh, store = make_mesh(ledger=PendingWriteLedger(tmp_path / "journal"))
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    nodes = tuple(doc(f"p/b{i}") for i in range(5))
    answer = await first_value(
        mesh.create_nodes(CreateNodesRequest(nodes=nodes, access=ALICE)), timeout=10
    )
    assert answer.rejection_reason is RejectionReason.UNAVAILABLE
    assert answer.recorded_for_reissue == tuple(n.path for n in nodes)
    assert answer.not_recorded == ()
    assert "will not be re-issued" not in (answer.error or "")


async def test_a_single_create_says_whether_it_was_recorded() -> None:
    mesh, store = make_mesh()
    await mesh.create(doc("p/seed"), access=ALICE)
    store.refuse_writes_as_unreachable()
    recorded = await first_value(
        mesh.create_node(CreateNodeRequest(node=doc("p/x"), access=ALICE)), timeout=5
    )
    assert recorded.recorded_for_reissue is True
    off, off_store = make_mesh(record_pending_writes=False)
    await off.create(doc("p/seed"), access=ALICE)
    off_store.refuse_writes_as_unreachable()
    unrecorded = await first_value(
        off.create_node(CreateNodeRequest(node=doc("p/x"), access=ALICE)), timeout=5
    )
    assert unrecorded.rejection_reason is RejectionReason.UNAVAILABLE
    assert unrecorded.recorded_for_reissue is False
    assert "will not be re-issued" in (unrecorded.error or "")
