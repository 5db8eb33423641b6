"""The live record census (SPEC §6, §8), in virtual time: a standing watch over NodeType records
that re-opens after a transient fault through the cache, keeps the registry baked and tells health.

The world is the real pipeline: InMemoryStore -> FaultInjectingStore -> fan_in -> SyncedQueryCache
-> LiveRecordCensus, every timer on one TestScheduler (1 tick = 1 second of backoff). The
in-memory store emits synchronously, so the census reads at start() and the TestScheduler only
drives the backoff timers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from reactivex.testing import TestScheduler

from rxmesh.cache import SyncedQueryCache, fold_query_frames
from rxmesh.exceptions import StoreError
from rxmesh.health import HealthStatus, LiveRecordCensusCheck, LiveRecordReading
from rxmesh.model import MeshNode, NodeQuery, QueryFrame
from rxmesh.nodetypes import NodeTypeRegistry
from rxmesh.nodetypes.census import CENSUS_QUERY, LiveRecordCensus, describe_chain
from rxmesh.operators import fan_in
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore, connection_reset_error
from tests.helpers import LogRecords, done

INTERRUPTED = (
    "StoreError interrupted the census subscription — re-opening (1/5) in 2s: "
    "StoreError: store 'memory': connection lost mid-stream ← "
    "ConnectionResetError: [Errno 104] Connection reset by peer"
)
"""The exact health text after the incident's fault (the outer type first, then the chain)."""


def record(path: str, name: str) -> MeshNode:
    return MeshNode(
        path=path,
        node_type="NodeType",
        content={"name": name, "fields": {"text": {"type": "string"}}},
    )


@dataclass
class World:
    scheduler: TestScheduler
    inner: InMemoryStore
    store: FaultInjectingStore
    cache: SyncedQueryCache[NodeQuery, QueryFrame]
    registry: NodeTypeRegistry
    check: LiveRecordCensusCheck

    def census(self, **options: object) -> LiveRecordCensus:
        return LiveRecordCensus(
            self.cache,
            self.registry,
            self.check,
            scheduler=self.scheduler,
            **options,  # type: ignore[arg-type]
        )

    def write(self, node: MeshNode) -> None:
        done(self.inner.write(node))

    def status(self) -> tuple[HealthStatus, str]:
        result = self.check()
        return result.status, result.description


def make_world(*records: MeshNode) -> World:
    scheduler = TestScheduler()
    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    cache: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
        lambda q: fan_in({"memory": store.query(q)}, query=q, scheduler=scheduler),
        scheduler=scheduler,
        replay=fold_query_frames,
    )
    world = World(scheduler, inner, store, cache, NodeTypeRegistry(), LiveRecordCensusCheck())
    for node in records:
        world.write(node)
    return world


def boot() -> World:
    return make_world(record("types/Invoice", "Invoice"), record("types/Note", "Note"))


def test_a_healthy_census_reads_bakes_and_reports_every_record() -> None:
    world = boot()
    census = world.census().start()

    assert world.registry.names() == ("Invoice", "Note")
    assert world.status() == (
        HealthStatus.HEALTHY,
        "LIVE RECORD CENSUS: 2 NodeType records watched",
    )
    stats = census.statistics()
    assert (stats.running, stats.opens, stats.readings, stats.records) == (True, 1, 1, 2)
    assert world.cache.statistics().upstream_subscriptions == 1
    assert census.records[0].path == "types/Invoice"


def test_the_census_reopens_after_a_mid_stream_connection_reset_and_reads_again(
    log_records: LogRecords,
) -> None:
    world = boot()
    world.store.die_mid_stream(after_frames=1)  # the Initial, then the incident's chain

    census = world.census().start()

    # The Initial was read, then the fault: health degrades and says why, naming the chain.
    assert census.statistics().readings == 1
    status, text = world.status()
    assert status is HealthStatus.DEGRADED
    assert text.startswith(f"LIVE RECORD CENSUS: {INTERRUPTED}; last reading (2 NodeType records")
    assert text.endswith("is frozen")
    assert world.cache.statistics().evictions == 1

    world.scheduler.advance_to(1)  # the backoff is 2 s: nothing re-opened yet
    assert census.statistics().opens == 1
    assert world.store.counts["query"] == 1

    world.scheduler.advance_to(2)
    stats = census.statistics()
    assert (stats.opens, stats.readings, stats.reopens, stats.running) == (2, 2, 1, True)
    # The factory asked the cache again, and the cache opened a FRESH upstream.
    assert world.cache.statistics().upstream_subscriptions == 2
    assert world.store.counts["query"] == 2
    assert [op.outcome for op in world.store.operations if op.op == "query"] == [
        "doomed",
        "forwarded",
    ]
    # The next reading cleared the fault.
    assert world.status() == (
        HealthStatus.HEALTHY,
        "LIVE RECORD CENSUS: 2 NodeType records watched",
    )
    assert stats.last_fault is None

    warnings = [str(r["message"]) for r in log_records.at("WARNING")]
    assert any("interrupted the standing watch subscription" in m for m in warnings)

    # And it keeps reading: a record added after the re-open is baked.
    world.write(record("types/Order", "Order"))
    assert world.registry.names() == ("Invoice", "Note", "Order")
    assert world.status()[1] == "LIVE RECORD CENSUS: 3 NodeType records watched"
    census.dispose()


def test_negative_control_the_raw_census_terminates_on_the_same_fault() -> None:
    world = boot()
    world.store.die_mid_stream(after_frames=1)

    census = world.census(reopen=False).start()
    world.scheduler.advance_to(600)

    stats = census.statistics()
    assert (stats.ended, stats.running, stats.opens, stats.reopens) == (True, False, 1, 0)
    assert world.cache.statistics().upstream_subscriptions == 1
    assert world.store.counts["query"] == 1
    status, text = world.status()
    assert status is HealthStatus.DEGRADED
    assert text.startswith(
        "LIVE RECORD CENSUS: census ended: StoreError: store 'memory': connection lost "
        "mid-stream ← ConnectionResetError: [Errno 104] Connection reset by peer "
        "(the raw census does not re-open); last reading (2 NodeType records"
    )
    # The record re-keyed after the fault is no longer being watched for.
    done(world.inner.update(record("types/Note", "Memo")))
    assert world.registry.names() == ("Invoice", "Note")


@pytest.mark.parametrize(
    "fault",
    [
        lambda: StoreError('relation "nodes" does not exist', sqlstate="42P01"),
        lambda: RuntimeError("defect"),
        lambda: TimeoutError("time-box"),
    ],
    ids=["42P01", "defect", "bare-TimeoutError"],
)
def test_a_non_transient_fault_ends_the_census_with_no_reopen_and_health_stays_degraded(
    fault: object, log_records: LogRecords
) -> None:
    world = boot()
    world.store.die_mid_stream(after_frames=1, exc_factory=fault)  # type: ignore[arg-type]

    census = world.census().start()
    world.scheduler.advance_to(600)

    stats = census.statistics()
    assert (stats.ended, stats.opens, stats.reopens) == (True, 1, 0)
    assert world.store.counts["query"] == 1
    status, text = world.status()
    assert status is HealthStatus.DEGRADED
    assert text.startswith("LIVE RECORD CENSUS: census ended: ")
    assert "(not a transient fault, not re-opened)" in text
    assert "last reading (2 NodeType records" in text
    errors = [str(r["message"]) for r in log_records.at("ERROR")]
    assert any("live record census: census ended" in m for m in errors)


def test_a_store_that_stays_down_spends_the_budget_and_the_last_fault_stays_on_health() -> None:
    world = boot()
    world.store.die_mid_stream(after_frames=1)
    census = world.census().start()
    world.store.refuse_reads_as_unreachable()  # every re-open is refused at connect
    texts: list[str] = []

    # Each refused re-open first spends fan_in's connect ladder (0.25 + 0.5 + 1 = 1.75 s), then
    # the census waits 2, 5, 15, 30, 60 s: re-opens at 2, 8.75, 25.5, 57.25, 119; ends at 120.75.
    for moment in (2, 8.75, 25.5, 57.25, 119):
        world.scheduler.advance_to(moment - 0.5)
        texts.append(world.status()[1])
        world.scheduler.advance_to(moment)
    world.scheduler.advance_to(120.5)
    assert census.statistics().ended is False
    world.scheduler.advance_to(120.75)

    stats = census.statistics()
    assert (stats.opens, stats.reopens, stats.ended) == (6, 5, True)
    assert [t.split(" — ")[1].split(":")[0] for t in texts] == [
        "re-opening (1/5) in 2s",
        "re-opening (2/5) in 5s",
        "re-opening (3/5) in 15s",
        "re-opening (4/5) in 30s",
        "re-opening (5/5) in 60s",
    ]
    status, text = world.status()
    assert status is HealthStatus.DEGRADED
    assert "census ended: StoreError: store 'memory' unreachable: connection refused" in text
    assert "the re-open budget of 5 in a row without a reading is spent" in text

    world.store.restore()  # nothing re-opens a census that ended: the fault stays on health
    world.scheduler.advance_to(1000)
    assert census.statistics().opens == 6
    assert world.status()[0] is HealthStatus.DEGRADED


def test_a_record_rekeyed_after_boot_is_rebaked_and_shows_in_the_census() -> None:
    world = boot()
    census = world.census().start()

    done(world.inner.update(record("types/Note", "Memo")))  # renamed after boot
    assert world.registry.names() == ("Invoice", "Memo")
    done(world.inner.move("types/Invoice", "types/Bill"))  # re-keyed by path
    assert world.registry.names() == ("Invoice", "Memo")
    assert world.registry.get("Invoice") is not None
    assert world.registry.get("Invoice").path == "types/Bill"  # type: ignore[union-attr]
    done(world.inner.delete("types/Bill"))
    assert world.registry.names() == ("Memo",)

    assert census.statistics().records == 1
    assert world.status()[1] == "LIVE RECORD CENSUS: 1 NodeType record watched"


def test_a_record_rekeyed_during_the_interruption_is_seen_by_the_reopened_census() -> None:
    world = boot()
    world.store.die_mid_stream(after_frames=1)
    world.census().start()

    done(world.inner.update(record("types/Note", "Memo")))  # while nobody watches
    assert world.registry.names() == ("Invoice", "Note")
    world.scheduler.advance_to(2)
    assert world.registry.names() == ("Invoice", "Memo")


def test_a_malformed_record_is_counted_and_the_census_keeps_reading() -> None:
    bad = MeshNode(path="types/Bad", node_type="NodeType", content={"name": "Bad", "fields": 3})
    world = make_world(record("types/Note", "Note"), bad)
    census = world.census().start()

    assert world.registry.names() == ("Note",)
    assert world.registry.statistics().malformed_paths == ("types/Bad",)
    assert census.statistics().records == 2
    result = world.check()
    assert result.status is HealthStatus.HEALTHY
    assert result.data["baked"] == 1


def test_disposal_cancels_a_pending_reopen() -> None:
    world = boot()
    world.store.die_mid_stream(after_frames=1)
    census = world.census().start()

    census.dispose()
    world.scheduler.advance_to(600)

    assert census.statistics().opens == 1
    assert census.statistics().running is False


def test_a_census_starts_once() -> None:
    census = boot().census().start()
    with pytest.raises(RuntimeError):
        census.start()


def test_the_census_query_and_the_chain_description() -> None:
    assert NodeQuery(node_type="NodeType") == CENSUS_QUERY
    assert describe_chain(connection_reset_error("db")) == (
        "StoreError: store 'db': connection lost mid-stream ← "
        "ConnectionResetError: [Errno 104] Connection reset by peer"
    )


def _stalled_monitor() -> tuple[object, object]:
    """A LoopStallMonitor on a fake loop that has just recorded a 3.2 s stall ending 0.3 s ago."""
    from rxmesh.diagnosis import LoopStallMonitor
    from tests.diagnosis.conftest import FakeClock, FakeLoop

    clock, loop = FakeClock(), FakeLoop()
    monitor = LoopStallMonitor(clock=clock)
    monitor.start(loop=loop)  # type: ignore[arg-type]
    clock.advance(1.0 + 3.2)
    loop.fire()
    clock.advance(0.3)
    return monitor, clock


def test_a_store_unreachable_interruption_after_a_stall_carries_the_adjacency_sentence() -> None:
    world = boot()
    world.store.die_mid_stream(after_frames=1)
    monitor, _ = _stalled_monitor()
    try:
        census = world.census().start()
    finally:
        monitor.stop()  # type: ignore[attr-defined]

    sentence = (
        "this process's event loop stalled 3.2 s, ending 0.3 s before this fault "
        "— check this process before the database"
    )
    assert world.status()[1].startswith(f"LIVE RECORD CENSUS: {INTERRUPTED}; {sentence}; last")
    assert census.statistics().last_fault == f"{INTERRUPTED}; {sentence}"


def test_control_a_transient_fault_that_is_not_store_unreachable_carries_no_adjacency() -> None:
    world = boot()
    # A socket error with no DB frame: transient for a standing watch, not "the store" (§1).
    world.store.die_mid_stream(after_frames=1, exc_factory=lambda: ConnectionResetError(104, "x"))
    monitor, _ = _stalled_monitor()
    try:
        census = world.census().start()
    finally:
        monitor.stop()  # type: ignore[attr-defined]

    assert census.statistics().last_fault == (
        "ConnectionResetError interrupted the census subscription — re-opening (1/5) in 2s: "
        "ConnectionResetError: [Errno 104] x"
    )


async def test_on_the_asyncio_loop_a_type_created_through_the_mesh_is_baked_by_the_census() -> None:
    """End to end, no virtual time: the census runs its timers on the running loop."""
    import asyncio

    from rxmesh import AccessContext, Mesh
    from rxmesh.ledger import PendingWriteLedger

    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    registry = NodeTypeRegistry(strict=True)
    mesh = Mesh(store, node_types=registry, ledger=PendingWriteLedger(journal_dir=None))
    cache: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
        lambda q: fan_in({"memory": store.query(q)}, query=q), replay=fold_query_frames
    )
    baked_note = asyncio.Event()
    reread = asyncio.Event()
    censuses: list[LiveRecordCensus] = []

    class Check(LiveRecordCensusCheck):
        def record_live_records(self, reading: int | LiveRecordReading) -> None:
            super().record_live_records(reading)
            if "Note" in registry:
                baked_note.set()
            if censuses and censuses[0].statistics().opens >= 2:
                reread.set()  # a reading after the re-open

    check = Check()
    store.die_mid_stream(after_frames=1)
    census = LiveRecordCensus(cache, registry, check, backoff=(0.01,))
    censuses.append(census)
    census.start()
    alice = AccessContext(user="alice")
    typed = MeshNode(path="acme/n1", node_type="Note", content={"text": "hi"})

    with pytest.raises(Exception, match="unknown node type 'Note'"):
        await mesh.create(typed, access=alice)
    await mesh.create(record("types/Note", "Note"), access=alice)
    await asyncio.wait_for(baked_note.wait(), 5)
    created = await mesh.create(typed, access=alice)

    assert created.node_type == "Note"
    await asyncio.wait_for(reread.wait(), 5)
    assert census.statistics().opens == 2
    assert check().description == "LIVE RECORD CENSUS: 1 NodeType record watched"
    census.dispose()
    mesh.dispose()
