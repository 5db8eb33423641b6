"""The census re-opens from its last reading's resume token: after a transient fault it reads a
Delta of what changed meanwhile (a cache that can open a resumed upstream) instead of every
NodeType record again, and the registry follows it all the same."""

from __future__ import annotations

from reactivex import Observable
from reactivex import operators as ops
from reactivex.testing import TestScheduler

from rxmesh.cache import SyncedQueryCache, fold_query_frames
from rxmesh.health import LiveRecordCensusCheck
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.nodetypes import NodeTypeRegistry
from rxmesh.nodetypes.census import LiveRecordCensus
from rxmesh.operators import fan_in
from rxmesh.providers.memory import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import done


def record(path: str, name: str) -> MeshNode:
    return MeshNode(
        path=path,
        node_type="NodeType",
        content={"name": name, "fields": {"text": {"type": "string"}}},
    )


def run(resumable: bool) -> tuple[list[QueryFrame], NodeTypeRegistry, LiveRecordCensus]:
    scheduler = TestScheduler()
    inner = InMemoryStore()
    store = FaultInjectingStore(inner)
    for path, name in (("types/Invoice", "Invoice"), ("types/Note", "Note")):
        done(inner.write(record(path, name)))
    read: list[QueryFrame] = []

    def open_query(query: NodeQuery, token: str | None = None) -> Observable[QueryFrame]:
        frames = fan_in({"memory": store.query(query, token)}, query=query, scheduler=scheduler)
        return frames.pipe(ops.do_action(read.append))

    cache: SyncedQueryCache[NodeQuery, QueryFrame] = SyncedQueryCache(
        open_query,
        scheduler=scheduler,
        replay=fold_query_frames,
        open_resumed=open_query if resumable else None,
    )
    registry = NodeTypeRegistry()
    census = LiveRecordCensus(cache, registry, LiveRecordCensusCheck(), scheduler=scheduler)
    store.die_mid_stream(after_frames=1)
    census.start()
    done(inner.delete("types/Note"))  # while the census waits to re-open
    done(inner.write(record("types/Order", "Order")))
    scheduler.advance_to(2)
    return read, registry, census


def test_the_reopen_reads_only_what_changed_meanwhile() -> None:
    read, registry, census = run(resumable=True)
    reopened = read[-1]
    assert reopened.kind is FrameKind.DELTA and reopened.resumed
    assert [n.path for n in reopened.nodes] == ["types/Order"]
    assert reopened.removed == ("types/Note",)
    assert registry.names() == ("Invoice", "Order")
    assert [n.path for n in census.records] == ["types/Invoice", "types/Order"]
    assert census.statistics().reopens == 1


def test_negative_control_a_cache_that_cannot_resume_reads_everything_again() -> None:
    read, registry, census = run(resumable=False)
    reopened = read[-1]
    assert reopened.kind is FrameKind.INITIAL
    assert [n.path for n in reopened.nodes] == ["types/Invoice", "types/Order"]
    assert registry.names() == ("Invoice", "Order")  # the same registry either way
    assert [n.path for n in census.records] == ["types/Invoice", "types/Order"]
