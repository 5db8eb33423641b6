"""The awaitable records: durable before they return, group-committed on the writer thread."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rxmesh import AccessContext
from rxmesh.ledger import (
    JournalError,
    PendingWrite,
    PendingWriteHeldError,
    PendingWriteLedger,
    PendingWriteOutcome,
)
from rxmesh.ledger._core import _Reservation
from rxmesh.ledger._writer import Writer
from rxmesh.operations import Verdict
from tests.ledger._blocking import BOUND, FdatasyncGate
from tests.ledger._fakes import make_intent, reloaded


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> FdatasyncGate:
    gate = FdatasyncGate()
    monkeypatch.setattr(os, "fdatasync", gate)
    return gate


@pytest.fixture
def ledger(journal_dir: Path) -> Iterator[PendingWriteLedger]:
    ledger = PendingWriteLedger(journal_dir)
    yield ledger
    ledger.close()


def _json_files(journal_dir: Path) -> list[Path]:
    return list(journal_dir.glob("*.json"))


async def test_record_durably_returns_only_once_its_fdatasync_returned(
    ledger: PendingWriteLedger, gate: FdatasyncGate, journal_dir: Path
) -> None:
    gate.close()
    task = asyncio.create_task(ledger.record_durably(make_intent()))
    await gate.wait_entered()
    assert not task.done()  # the disk has not answered: not recorded yet
    assert ledger.pending() == ()
    gate.open()
    async with asyncio.timeout(BOUND):
        assert await task is True
    assert [i.request_id for i in ledger.pending()] == ["req-1"]
    ledger.close()
    assert reloaded(journal_dir) == [("acme/docs/readme", "req-1")]


async def test_the_loop_keeps_running_while_the_disk_is_slow(
    ledger: PendingWriteLedger, gate: FdatasyncGate
) -> None:
    """The durable step is on the writer thread: the loop runs other work meanwhile."""
    gate.close()
    task = asyncio.create_task(ledger.record_durably(make_intent()))
    await gate.wait_entered()
    ticks = 0
    for _ in range(100):
        await asyncio.sleep(0)
        ticks += 1
    assert ticks == 100
    assert not task.done()
    gate.open()
    async with asyncio.timeout(BOUND):
        await task


async def test_concurrent_records_share_one_fdatasync(
    ledger: PendingWriteLedger, gate: FdatasyncGate, journal_dir: Path
) -> None:
    await ledger.record_durably(make_intent("acme/first", request_id="first"))  # segment exists
    gate.close()
    calls = gate.calls
    blocker = asyncio.create_task(
        ledger.record_durably(make_intent("acme/blocker", request_id="b"))
    )
    await gate.wait_entered()  # the writer is inside one group's fdatasync...
    intents = [make_intent(f"acme/n{i}", request_id=f"r{i}") for i in range(500)]
    tasks = [asyncio.create_task(ledger.record_durably(i)) for i in intents]
    for _ in range(3):
        await asyncio.sleep(0)  # ...while 500 more are decided and queued behind it
    gate.open()
    async with asyncio.timeout(BOUND):
        assert await asyncio.gather(blocker, *tasks) == [True] * 501
    assert gate.calls - calls == 2  # the blocker's group, and ONE for the 500
    assert ledger.statistics().pending == 502
    ledger.close()
    assert len(reloaded(journal_dir)) == 502


async def test_negative_control_sequential_records_each_pay_their_fdatasync(
    ledger: PendingWriteLedger, gate: FdatasyncGate
) -> None:
    await ledger.record_durably(make_intent("acme/first", request_id="first"))
    calls = gate.calls
    for i in range(5):
        assert await ledger.record_durably(make_intent(f"acme/s{i}", request_id=f"s{i}"))
    assert gate.calls - calls == 5


async def test_a_bulk_is_one_durable_step_with_one_result_per_intent(
    ledger: PendingWriteLedger, gate: FdatasyncGate, journal_dir: Path
) -> None:
    await ledger.record_durably(make_intent("acme/first", request_id="first"))
    await ledger.record_durably(make_intent("acme/held", request_id="bob-1", user="bob"))
    hostile = make_intent("acme/bad").model_copy(
        update={"access": AccessContext.model_construct(user="alice", on_behalf_of="x\ud800")}
    )
    nodes = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(2500)]
    calls = gate.calls

    results = await ledger.record_many_durably(
        [*nodes, make_intent("acme/held", request_id="bulk"), hostile, nodes[0]]
    )

    assert results[:2500] == [True] * 2500
    assert isinstance(results[2500], PendingWriteHeldError)  # bob holds it: alice's refused
    assert isinstance(results[2501], JournalError)  # cannot be encoded: never written
    assert results[2502] is False  # already pending, unchanged
    assert gate.calls - calls == 1  # one fdatasync for the whole bulk
    ledger.close()
    paths = {path for path, _ in reloaded(journal_dir)}
    assert len(paths) == 2502
    assert "acme/bad" not in paths


async def test_two_requesters_racing_for_one_path_resolve_as_if_sequential(
    ledger: PendingWriteLedger, gate: FdatasyncGate
) -> None:
    """Decided when called, before anything is written: the second is refused while the first
    is still waiting for the disk."""
    gate.close()
    first = asyncio.create_task(ledger.record_durably(make_intent(request_id="a", user="alice")))
    await gate.wait_entered()
    with pytest.raises(PendingWriteHeldError):
        await ledger.record_durably(make_intent(request_id="b", user="bob"))
    with pytest.raises(PendingWriteHeldError):
        ledger.record(make_intent(request_id="c", user="carol"))  # the sync path agrees
    gate.open()
    async with asyncio.timeout(BOUND):
        assert await first is True
    assert [(i.requester, i.request_id) for i in ledger.pending()] == [("alice", "a")]
    assert ledger.statistics().held == 2


async def test_negative_control_racing_records_of_different_paths_are_both_recorded(
    ledger: PendingWriteLedger,
) -> None:
    async with asyncio.timeout(BOUND):
        both = await asyncio.gather(
            ledger.record_durably(make_intent("acme/a", request_id="a", user="alice")),
            ledger.record_durably(make_intent("acme/b", request_id="b", user="bob")),
        )
    assert both == [True, True]


async def test_a_concurrent_replacement_by_the_same_requester_supersedes_in_order(
    ledger: PendingWriteLedger, journal_dir: Path
) -> None:
    seen: list[PendingWriteOutcome] = []
    ledger.outcomes.subscribe(seen.append)
    async with asyncio.timeout(BOUND):
        await asyncio.gather(
            ledger.record_durably(make_intent(request_id="r1")),
            ledger.record_durably(make_intent(request_id="r2")),
        )
    assert [i.request_id for i in ledger.pending()] == ["r2"]
    assert [(o.intent.request_id, o.verdict, o.superseded_by) for o in seen] == [
        ("r1", Verdict.DROPPED, "r2")
    ]
    stats = ledger.statistics()
    assert (stats.recorded, stats.replaced, stats.superseded) == (2, 1, 1)
    ledger.close()
    assert reloaded(journal_dir) == [("acme/docs/readme", "r2")]


async def test_an_intent_it_cannot_encode_raises_before_anything_is_written(
    ledger: PendingWriteLedger, gate: FdatasyncGate
) -> None:
    hostile = make_intent().model_copy(
        update={"access": AccessContext.model_construct(user="alice", on_behalf_of="x\ud800")}
    )
    with pytest.raises(JournalError, match="could not encode"):
        await ledger.record_durably(hostile)
    assert gate.calls == 0
    assert ledger.pending() == ()
    # the path is free again: nothing was reserved
    assert await ledger.record_durably(make_intent(request_id="ok", user="bob"))


async def test_a_failed_fdatasync_records_nothing_frees_the_paths_and_the_next_group_recovers(
    ledger: PendingWriteLedger, gate: FdatasyncGate, journal_dir: Path
) -> None:
    await ledger.record_durably(make_intent("acme/kept", request_id="kept"))
    gate.fail_with = OSError(5, "Input/output error")
    async with asyncio.timeout(BOUND):
        failed = await asyncio.gather(
            ledger.record_durably(make_intent("acme/lost", request_id="lost")),
            return_exceptions=True,
        )
    assert isinstance(failed[0], JournalError)
    assert isinstance(failed[0].__cause__, OSError)
    assert [i.path for i in ledger.pending()] == ["acme/kept"]
    gate.fail_with = None
    # Another requester may take the path now: the failed reservation was rolled back.
    assert await ledger.record_durably(make_intent("acme/lost", request_id="bob", user="bob"))
    ledger.close()
    assert reloaded(journal_dir) == [("acme/kept", "kept"), ("acme/lost", "bob")]


async def test_a_cancelled_caller_does_not_undo_the_record(
    ledger: PendingWriteLedger, gate: FdatasyncGate, journal_dir: Path
) -> None:
    gate.close()
    task = asyncio.create_task(ledger.record_durably(make_intent()))
    await gate.wait_entered()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.open()
    ledger.close()  # commits what is queued
    assert reloaded(journal_dir) == [("acme/docs/readme", "req-1")]


async def test_a_settled_logged_intent_is_removed_from_the_log(
    ledger: PendingWriteLedger, journal_dir: Path
) -> None:
    await ledger.record_durably(make_intent("acme/a", request_id="a"))
    await ledger.record_durably(make_intent("acme/b", request_id="b"))
    for taken in ledger.take_all():
        if taken.path == "acme/a":
            ledger.settle(taken, PendingWriteOutcome(intent=taken, verdict=Verdict.LANDED))
        else:
            ledger.restore(taken)
    ledger.close()
    assert reloaded(journal_dir) == [("acme/b", "b")]


async def test_close_commits_stops_the_writer_and_later_records_fail(
    journal_dir: Path,
) -> None:
    ledger = PendingWriteLedger(journal_dir)
    await ledger.record_durably(make_intent())
    writers = [t for t in threading.enumerate() if t.name == "rxmesh-journal-writer"]
    assert len(writers) == 1
    assert writers[0].daemon  # a ledger nobody closes never holds up interpreter exit
    ledger.close()
    ledger.close()  # idempotent
    assert not writers[0].is_alive()
    with pytest.raises(JournalError, match="closed"):
        await ledger.record_durably(make_intent("acme/other"))
    with pytest.raises(JournalError, match="closed"):
        await ledger.record_many_durably([make_intent("acme/other")])


async def test_the_sync_record_of_a_logged_path_goes_through_the_writer_in_order(
    ledger: PendingWriteLedger, journal_dir: Path
) -> None:
    await ledger.record_durably(make_intent(request_id="r1"))
    assert ledger.record(make_intent(request_id="r2")) is True  # same requester: replaces r1
    assert _json_files(journal_dir) == []  # one copy, in the log, never in both formats
    ledger.close()
    assert reloaded(journal_dir) == [("acme/docs/readme", "r2")]


async def test_in_memory_the_awaitable_records_need_no_thread() -> None:
    ledger = PendingWriteLedger()
    intent = make_intent()
    assert await ledger.record_durably(intent) is True
    assert await ledger.record_many_durably([intent, make_intent("acme/x")]) == [
        False,
        True,
    ]
    assert not [t for t in threading.enumerate() if t.name == "rxmesh-journal-writer"]


async def test_a_record_made_while_a_bulk_is_being_decided_lands_after_it(
    ledger: PendingWriteLedger, journal_dir: Path
) -> None:
    """A bulk is decided 500 intents per loop step; a record of one of its paths made in
    between replaces the bulk's intent, in memory AND on disk (its ticket waits for the bulk's)."""
    nodes = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(2500)]
    bulk = asyncio.create_task(ledger.record_many_durably(nodes))
    single = asyncio.create_task(
        ledger.record_durably(make_intent("acme/bulk/n0", request_id="later"))
    )
    async with asyncio.timeout(BOUND):
        results, later = await asyncio.gather(bulk, single)
    assert results == [True] * 2500
    assert later is True
    pending = {i.path: i.request_id for i in ledger.pending()}
    assert pending["acme/bulk/n0"] == "later"
    ledger.close()
    assert dict(reloaded(journal_dir))["acme/bulk/n0"] == "later"


async def test_closing_while_a_bulk_is_being_decided_records_none_of_it(journal_dir: Path) -> None:
    ledger = PendingWriteLedger(journal_dir)
    nodes = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(2500)]
    bulk = asyncio.create_task(ledger.record_many_durably(nodes))
    await asyncio.sleep(0)  # the first 500 are decided and reserved
    ledger.close()
    with pytest.raises(JournalError, match="closed"):
        async with asyncio.timeout(BOUND):
            await bulk
    assert ledger.pending() == ()
    assert reloaded(journal_dir) == []


def test_a_writer_that_ends_between_two_tickets_never_strands_the_second(
    journal_dir: Path,
) -> None:
    """With no linger the thread ends after every ticket; a ticket queued as it ends must
    start a new one (it used to be able to land in the queue of a thread on its way out)."""
    from rxmesh.ledger._journal import Journal
    from rxmesh.ledger._log import Log, encode_put
    from rxmesh.ledger._writer import Op, Ticket, Writer

    journal = Journal(journal_dir)
    log = Log(journal)
    writer = Writer(journal, log, lambda ticket: None, lambda batch: None, linger=0.0)
    try:
        for i in range(200):
            intent = make_intent(f"acme/w{i}", request_id=f"w{i}")
            ticket = Ticket([Op("put", intent.path, intent, encode_put(intent))])
            writer.submit(ticket)
            assert ticket.done.wait(BOUND), f"ticket {i} was stranded"
            assert ticket.ops[0].error is None
    finally:
        writer.close()
        log.close()
        journal.close()


def test_a_sync_record_on_the_loop_never_waits_behind_a_bulk_that_loop_is_deciding(
    journal_dir: Path,
) -> None:
    """FAILS against the first version (it hung for ever): the sync record's ticket queued behind
    the bulk's open ticket, and the loop that would seal it was the one blocked waiting. Now the
    sync record seals the open ticket first; the bulk continues in a new one."""
    outcome: dict[str, object] = {}

    async def scenario() -> None:
        ledger = PendingWriteLedger(journal_dir)
        try:
            nodes = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(2500)]
            bulk = asyncio.create_task(ledger.record_many_durably(nodes))
            await asyncio.sleep(0)  # the first 1,000 are decided; the bulk yields
            outcome["sync"] = ledger.record(make_intent("acme/bulk/n0", request_id="sync"))
            async with asyncio.timeout(BOUND):
                outcome["bulk"] = await bulk
            outcome["pending"] = {i.path: i.request_id for i in ledger.pending()}["acme/bulk/n0"]
        finally:
            ledger.close()

    thread = threading.Thread(target=lambda: asyncio.run(scenario()), daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "the synchronous record waited for ever behind the bulk"
    assert outcome["sync"] is True
    assert outcome["bulk"] == [True] * 2500
    assert outcome["pending"] == "sync"
    assert dict(reloaded(journal_dir))["acme/bulk/n0"] == "sync"


async def test_a_bulk_is_encoded_on_the_loop_500_a_step_not_by_the_writer_thread(
    ledger: PendingWriteLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread only writes. Encoding a 10,000-node bulk there made it compute beside
    the loop, and every loop step doing I/O meanwhile waited for the GIL at each hand-back (the
    change feed listener's steps reached 21-38 ms). Fails against d883eae (all 2,500 encoded on
    the writer thread); the single record is the control (encoded on the loop before too)."""
    import rxmesh.ledger._core as core
    import rxmesh.ledger._writer as writer

    loop_thread = threading.current_thread()
    where: list[str] = []
    per_turn: list[int] = [0]

    def counting(encode: Callable[[PendingWrite], bytes]) -> Callable[[PendingWrite], bytes]:
        def encoded(intent: PendingWrite) -> bytes:
            where.append("loop" if threading.current_thread() is loop_thread else "thread")
            per_turn[-1] += 1
            return encode(intent)

        return encoded

    monkeypatch.setattr(core, "encode_put", counting(core.encode_put))
    # The writer thread encoded a bulk's entries before (d883eae); it no longer imports the
    # encoder, so its name is set (not replaced) there now.
    monkeypatch.setattr(writer, "encode_put", counting(core.encode_put), raising=False)

    async def turns() -> None:
        while True:
            await asyncio.sleep(0)
            per_turn.append(0)

    ticker = asyncio.create_task(turns())
    try:
        assert await ledger.record_durably(make_intent("acme/one", request_id="one")) is True
        assert where == ["loop"]  # the control
        where.clear()
        nodes = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(2500)]
        async with asyncio.timeout(BOUND):
            assert await ledger.record_many_durably(nodes) == [True] * 2500
    finally:
        ticker.cancel()
    assert where == ["loop"] * 2500
    assert max(per_turn) <= 500, max(per_turn)


async def test_the_writer_keeps_nothing_of_a_committed_group_while_it_waits_for_the_next(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: at c1ffe01 the writer thread held its last group (every reservation of a bulk,
    with its encoded line) while it waited for the next one, up to its linger: 10,000 objects
    more for each full collection after a 10,000-node bulk answered UNAVAILABLE."""
    monkeypatch.setitem(Writer.__init__.__kwdefaults__, "linger", 60.0)  # it stays, waiting
    ledger = PendingWriteLedger(journal_dir)
    try:
        intents = [make_intent(f"acme/bulk/n{i}", request_id="bulk") for i in range(300)]
        async with asyncio.timeout(BOUND):
            assert await ledger.record_many_durably(intents) == [True] * 300
        gc.collect()
        assert any(t.name == "rxmesh-journal-writer" for t in threading.enumerate())
        assert sum(1 for o in gc.get_objects() if type(o) is _Reservation) == 0
        # The negative control: while a group is in flight its reservations are alive, so the
        # count above would have seen them.
        gate = FdatasyncGate()
        gate.close()
        monkeypatch.setattr(os, "fdatasync", gate)
        more = [make_intent(f"acme/more/n{i}", request_id="more") for i in range(5)]
        task = asyncio.create_task(ledger.record_many_durably(more))
        await gate.wait_entered()
        assert sum(1 for o in gc.get_objects() if type(o) is _Reservation) == 5
        gate.open()
        async with asyncio.timeout(BOUND):
            assert await task == [True] * 5
        assert len(ledger.pending()) == 305  # still recorded: nothing but the bookkeeping went
    finally:
        ledger.close()
