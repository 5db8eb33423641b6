"""What the in-memory store offers beyond the Store contract: its write log, gaps, statistics."""

from __future__ import annotations

import pytest
from reactivex.testing import TestScheduler

from rxmesh.exceptions import StoreConflictError
from rxmesh.model import ChangeFeedGap, MeshNode, NodeQuery, QueryFrame, StoreEvidence
from rxmesh.providers import InMemoryStore
from tests.helpers import done


def node(path: str, request_id: str = "r") -> MeshNode:
    return MeshNode(path=path, node_type="Note", request_id=request_id)


def test_the_write_log_records_every_write_type_attempt_including_refused_ones() -> None:
    store = InMemoryStore()
    done(store.write(node("p/a")))
    with pytest.raises(StoreConflictError):
        done(store.write(node("p/a", request_id="other")))
    store.write_many([node("p/b"), node("p/a")]).subscribe()
    done(store.update(node("p/b")))
    done(store.move("p/b", "p/c"))
    done(store.delete("p/zz"))
    assert store.write_log == [
        ("write", "p/a"),
        ("write", "p/a"),
        ("write_many", "p/b"),
        ("write_many", "p/a"),
        ("update", "p/b"),
        ("move", "p/b"),
        ("move", "p/c"),
        ("delete", "p/zz"),
    ]
    stats = store.statistics()
    assert stats.writes_attempted == 8
    assert stats.conflicts == 1
    assert stats.nodes == 2
    assert stats.windows_committed == 1


def test_reads_write_nothing_to_the_write_log() -> None:
    store = InMemoryStore()
    done(store.read("p/a"))
    done(store.read_many(["p/a"]))
    store.query(NodeQuery()).subscribe().dispose()
    assert store.write_log == []
    assert store.statistics().reads == 3


def test_a_declared_gap_reaches_gaps_and_answers_again_and_changes_no_query() -> None:
    store = InMemoryStore(name="mem-1")
    gaps: list[ChangeFeedGap] = []
    evidence: list[StoreEvidence] = []
    frames: list[QueryFrame] = []
    store.gaps.subscribe(gaps.append)
    store.answers_again.subscribe(evidence.append)
    store.query(NodeQuery(partition="p")).subscribe(frames.append)
    gap = store.declare_gap("drill")
    assert gaps == [gap]
    assert evidence == [gap]
    assert gap.source == "mem-1"
    assert len(frames) == 1  # nothing was missed, nothing to re-read
    assert store.statistics().gaps_declared == 1


def test_without_a_declaration_no_gap_is_published() -> None:
    store = InMemoryStore()
    gaps: list[ChangeFeedGap] = []
    store.gaps.subscribe(gaps.append)
    done(store.write(node("p/a")))
    assert gaps == []


def test_disposing_a_live_query_stops_its_deltas() -> None:
    store = InMemoryStore()
    frames: list[QueryFrame] = []
    subscription = store.query(NodeQuery(partition="p")).subscribe(frames.append)
    assert store.statistics().live_queries == 1
    subscription.dispose()
    done(store.write(node("p/a")))
    assert len(frames) == 1
    assert store.statistics().live_queries == 0


def test_a_commit_made_while_the_initial_is_delivered_follows_it_as_a_delta() -> None:
    store = InMemoryStore()
    frames: list[QueryFrame] = []

    def on_frame(frame: QueryFrame) -> None:
        frames.append(frame)
        if len(frames) == 1:
            done(store.write(node("p/during")))

    store.query(NodeQuery(partition="p")).subscribe(on_frame)
    assert [[n.path for n in f.nodes] for f in frames] == [[], ["p/during"]]


def test_the_store_works_under_a_virtual_time_scheduler() -> None:
    store = InMemoryStore()
    scheduler = TestScheduler()
    scheduler.schedule_absolute(300.0, lambda *_: done(store.write(node("p/a"))))
    results = scheduler.start(lambda: store.query(NodeQuery(partition="p")))
    assert [(m.time, m.value.kind) for m in results.messages] == [(200.0, "N"), (300.0, "N")]


def test_a_window_smaller_than_one_row_is_refused_at_call_time() -> None:
    with pytest.raises(ValueError):
        InMemoryStore().write_many([node("p/a")], window=0)
