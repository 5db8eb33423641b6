"""What a caller is told when the journal cannot make a record count (issue 31 items 5 and 6).

A create whose store is unreachable is answered UNAVAILABLE; "recorded for re-issue" only when the
next process would find the intent. A deleted journal directory, or a durable step that does not
return within the ledger's bound, answers "could NOT be journaled ... will not be re-issued", once,
promptly, with the reason; and nothing is re-issued later.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from reactivex import operators as ops

from rxmesh import CreateNodeRequest, CreateNodesRequest, RejectionReason
from rxmesh.aio import first_value
from rxmesh.ledger import PendingWriteLedger
from tests.helpers import ALICE, LogRecords, doc
from tests.ledger._blocking import BOUND, FdatasyncGate

from .conftest import make_mesh


def _reloaded(journal_dir: Path) -> list[str]:
    ledger = PendingWriteLedger(journal_dir)
    try:
        return sorted(i.path for i in ledger.pending())
    finally:
        ledger.close()


async def test_a_create_into_a_deleted_journal_is_answered_not_recorded(
    tmp_path: Path, log_records: LogRecords
) -> None:
    """Fails at 1d389e8 because the create was answered "recorded for re-issue" into the deleted
    directory, and a new ledger over the path found nothing to re-issue."""
    journal_dir = tmp_path / "journal"
    ledger = PendingWriteLedger(journal_dir)
    mesh, store = make_mesh(ledger=ledger)
    try:
        await mesh.create(doc("p/seed"), access=ALICE)
        store.refuse_writes_as_unreachable()
        first = await first_value(
            mesh.create_node(CreateNodeRequest(node=doc("p/before"), access=ALICE)), timeout=5
        )
        assert first.recorded_for_reissue is True  # the negative control: the journal is intact
        await asyncio.to_thread(shutil.rmtree, journal_dir)

        answers = await first_value(
            mesh.create_node(CreateNodeRequest(node=doc("p/x"), access=ALICE)).pipe(
                ops.to_list()
            ),
            timeout=5,
        )

        [answer] = answers
        assert answer.rejection_reason is RejectionReason.UNAVAILABLE
        assert answer.recorded_for_reissue is False
        assert "could NOT be journaled" in (answer.error or "")
        assert "was deleted" in (answer.error or "")
        assert [r for r in log_records.at("ERROR") if r["extra"].get("event") == "journal_failed"]
    finally:
        mesh.dispose()
        ledger.close()
    await asyncio.to_thread(os.makedirs, journal_dir, 0o700, True)
    assert await asyncio.to_thread(_reloaded, journal_dir) == []


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> FdatasyncGate:
    gate = FdatasyncGate()
    monkeypatch.setattr(os, "fdatasync", gate)
    return gate


async def test_creates_on_a_journal_that_stopped_answering_are_answered_within_the_bound(
    tmp_path: Path, gate: FdatasyncGate
) -> None:
    """21 creates and a bulk, the journal's fdatasync shut: every one answered NOT recorded
    (within the bound, not when the disk answers again); none re-issued afterwards. Fails at
    1d389e8 (no ``durable_timeout``: 0 of 21 answered while the disk did not answer)."""
    journal_dir = tmp_path / "journal"
    ledger = PendingWriteLedger(journal_dir, durable_timeout=0.05)
    mesh, store = make_mesh(ledger=ledger)
    try:
        await mesh.create(doc("p/seed"), access=ALICE)
        store.refuse_writes_as_unreachable()
        gate.close()
        creates = [
            first_value(
                mesh.create_node(CreateNodeRequest(node=doc(f"p/c{i}"), access=ALICE)), timeout=5
            )
            for i in range(21)
        ]
        bulk = first_value(
            mesh.create_nodes(
                CreateNodesRequest(nodes=(doc("p/b1"), doc("p/b2")), access=ALICE)
            ),
            timeout=5,
        )
        async with asyncio.timeout(BOUND):
            answers = await asyncio.gather(*creates)
            bulk_answer = await bulk
        assert all(a.rejection_reason is RejectionReason.UNAVAILABLE for a in answers)
        assert not any(a.recorded_for_reissue for a in answers)
        assert all("did not return within" in (a.error or "") for a in answers)
        assert bulk_answer.recorded_for_reissue == ()
        assert set(bulk_answer.not_recorded) == {"p/b1", "p/b2"}
        assert mesh.ledger.pending() == ()
    finally:
        gate.open()
        mesh.dispose()
        ledger.close()
    assert await asyncio.to_thread(_reloaded, journal_dir) == []
