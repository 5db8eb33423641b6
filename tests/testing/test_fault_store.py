"""FaultInjectingStore: every knob does what it says, counts it, and is inert when off."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import pytest
from reactivex import Observable
from reactivex.testing import ReactiveTest, TestScheduler

from rxmesh.aio import first_value
from rxmesh.exceptions import QueryProviderStalledError, StoreError
from rxmesh.faults import is_transient_connect_fault
from rxmesh.model import (
    ChangeFeedGap,
    CommitAnnounced,
    FrameKind,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
)
from rxmesh.operators import fan_in, retry_transient_connect
from rxmesh.providers import InMemoryStore, Store, observe
from rxmesh.testing import (
    WRITE_OPS,
    FaultInjectingStore,
    Operation,
    connect_timeout_error,
    connection_reset_error,
    unreachable_error,
)
from tests.helpers import done

NO_WAIT = (0.0, 0.0, 0.0)
"""The ladder's three rungs, without their waits (the knob is counted, not the ladder's time)."""
SUBSCRIBED = float(ReactiveTest.subscribed)
"""Virtual time at which ``TestScheduler.start`` subscribes."""


class Seen:
    """What a stream emitted or a verb answered, synchronously: the in-memory store emits at
    subscription time, and its verbs never suspend."""

    def __init__(self, source: Observable[Any] | Coroutine[Any, Any, Any]) -> None:
        self.items: list[Any] = []
        self.errors: list[Exception] = []
        self.completed = False
        if isinstance(source, Observable):
            self.subscription = source.subscribe(
                self.items.append, self.errors.append, self._complete
            )
            return
        try:
            self.items.append(done(source))
        except Exception as error:
            self.errors.append(error)
            return
        self.completed = True

    def _complete(self) -> None:
        self.completed = True

    @property
    def error(self) -> Exception:
        assert len(self.errors) == 1, self.errors
        return self.errors[0]


def node(path: str, request_id: str = "req-1", **content: object) -> MeshNode:
    return MeshNode(path=path, node_type="Note", content=dict(content), request_id=request_id)


@pytest.fixture
def inner() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def store(inner: InMemoryStore) -> FaultInjectingStore:
    return FaultInjectingStore(inner)


def write_ops(store: Store) -> dict[str, Observable[Any] | Coroutine[Any, Any, Any]]:
    return {
        "write": store.write(node("p/new")),
        "write_many": store.write_many([node("p/m1"), node("p/m2")]),
        "update": store.update(node("p/a", v=2)),
        "delete": store.delete("p/a"),
        "move": store.move("p/a", "p/b"),
    }


# -- transparency and the log ----------------------------------------------------------------


def test_with_no_knob_set_every_operation_is_forwarded_and_logged(
    store: FaultInjectingStore, inner: InMemoryStore
) -> None:
    assert store.name == inner.name
    assert isinstance(store, Store)
    assert Seen(store.write(node("p/a"))).items[0].version == 1
    assert Seen(store.read("p/a")).items[0].path == "p/a"
    assert set(Seen(store.read_many(["p/a", "p/x"])).items[0]) == {"p/a"}
    assert Seen(store.query(NodeQuery(partition="p"))).items[0].kind is FrameKind.INITIAL
    assert [op.outcome for op in store.operations] == ["forwarded"] * 4
    assert store.counts == {"write": 1, "read": 1, "read_many": 1, "query": 1}
    assert store.injected == {}
    assert inner.write_log == [("write", "p/a")]


def test_nothing_is_logged_until_an_operation_runs(store: FaultInjectingStore) -> None:
    source = store.write(node("p/a"))
    stream = store.write_many([node("p/b")])
    assert store.operations == []
    Seen(source)
    Seen(store.write(node("p/a")))
    Seen(stream)
    Seen(stream)
    assert store.counts["write"] == 2  # each call is an attempt
    assert store.counts["write_many"] == 2  # each subscription is an attempt


def test_operation_paths_name_what_was_touched() -> None:
    assert Operation("read", "p/a", "forwarded").paths == ("p/a",)
    assert Operation("move", ("p/a", "p/b"), "refused").paths == ("p/a", "p/b")
    assert Operation("query", NodeQuery(partition="p"), "forwarded").paths == ()


# -- refuse writes as unreachable ------------------------------------------------------------


def test_refused_writes_fail_as_unreachable_reach_nothing_and_are_logged(
    store: FaultInjectingStore, inner: InMemoryStore
) -> None:
    Seen(store.write(node("p/a")))
    inner.write_log.clear()
    store.refuse_writes_as_unreachable()
    for op, source in write_ops(store).items():
        error = Seen(source).error
        assert isinstance(error, StoreError), op
        assert error.sqlstate == "08001"
        assert isinstance(error.__cause__, ConnectionRefusedError)
        assert is_transient_connect_fault(error)
    assert inner.write_log == []  # nothing reached the store
    refused = [op for op in store.operations if op.outcome == "refused"]
    assert {op.op for op in refused} == WRITE_OPS
    assert store.injected["refused_write"] == 5
    assert [op.op for op in store.writes_attempted("p/b")] == ["move"]
    assert Seen(store.read("p/a")).items[0] is not None  # reads still pass


def test_restored_writes_pass_through_again(store: FaultInjectingStore) -> None:
    store.refuse_writes_as_unreachable()
    assert Seen(store.write(node("p/a"))).errors
    store.restore()
    landed = Seen(store.write(node("p/a")))
    assert landed.errors == []
    assert landed.items[0].path == "p/a"
    assert store.injected["refused_write"] == 1


def test_a_refusal_can_raise_a_chosen_exception(store: FaultInjectingStore) -> None:
    refusal = StoreError("too many connections", sqlstate="53300")
    store.refuse_writes_as_unreachable(lambda: refusal)
    assert Seen(store.delete("p/a")).error is refusal


def test_refused_reads_fail_reads_and_queries_until_restored(store: FaultInjectingStore) -> None:
    store.refuse_reads_as_unreachable()
    assert is_transient_connect_fault(Seen(store.read("p/a")).error)
    assert is_transient_connect_fault(Seen(store.read_many(["p/a"])).error)
    assert is_transient_connect_fault(Seen(store.query(NodeQuery(partition="p"))).error)
    assert store.injected["refused_read"] == 3
    store.restore()
    assert Seen(store.read("p/a")).items == [None]


def test_refused_reads_fail_pages_too_and_log_them(
    store: FaultInjectingStore, inner: InMemoryStore
) -> None:
    done(inner.write(node("p/a")))
    window = NodeQuery(partition="p", limit=5)
    assert [n.path for n in Seen(store.page(window, None, 5)).items[0]] == ["p/a"]
    store.refuse_reads_as_unreachable()
    assert is_transient_connect_fault(Seen(store.page(window, None, 5)).error)
    assert [op.outcome for op in store.operations if op.op == "page"] == ["forwarded", "refused"]
    assert store.counts["page"] == 2
    store.restore()
    assert len(Seen(store.page(window, None, 5)).items[0]) == 1


# -- fault the next read of a path -----------------------------------------------------------


def test_a_faulted_read_hits_only_that_path_and_only_times_subscriptions(
    store: FaultInjectingStore,
) -> None:
    Seen(store.write(node("p/root")))
    Seen(store.write(node("p/other")))
    store.fault_next_read("p/root", times=2)
    assert Seen(store.read("p/other")).items[0] is not None  # another path: untouched
    first = Seen(store.read("p/root")).error
    assert is_transient_connect_fault(first)
    assert isinstance(first.__cause__, TimeoutError)
    assert Seen(store.read_many(["p/other", "p/root"])).errors  # read_many counts too
    assert Seen(store.read("p/root")).items[0].path == "p/root"  # spent: passes through
    assert store.injected["faulted_read"] == 2
    assert [op.outcome for op in store.operations if "p/root" in op.paths][-3:] == [
        "faulted",
        "faulted",
        "forwarded",
    ]


def test_a_faulted_read_raises_exactly_the_factorys_exception(store: FaultInjectingStore) -> None:
    undefined = StoreError('relation "nodes" does not exist', sqlstate="42P01")
    store.fault_next_read("p/a", lambda: undefined)
    error = Seen(store.read("p/a")).error
    assert error is undefined
    assert not is_transient_connect_fault(error)  # the knob does not make it transient


async def test_a_retry_meets_a_faulted_read_again_on_each_resubscription(
    store: FaultInjectingStore,
) -> None:
    Seen(store.write(node("p/a")))
    store.fault_next_read("p/a", times=2)
    retried = observe(store.read, "p/a").pipe(retry_transient_connect(NO_WAIT))
    found = await first_value(retried)
    assert found is not None and found.path == "p/a"
    assert store.counts["read"] == 3
    assert store.injected["faulted_read"] == 2


async def test_a_read_fault_that_outlasts_the_ladder_surfaces(store: FaultInjectingStore) -> None:
    store.fault_next_read("p/a", times=5)
    retried = observe(store.read, "p/a").pipe(retry_transient_connect(NO_WAIT))
    with pytest.raises(StoreError) as surfaced:
        await first_value(retried)
    assert is_transient_connect_fault(surfaced.value)
    assert store.counts["read"] == 4
    assert store.injected["faulted_read"] == 4


# -- die mid-stream --------------------------------------------------------------------------


def test_a_query_dies_after_n_frames_with_the_incidents_chain(
    store: FaultInjectingStore,
) -> None:
    store.die_mid_stream(after_frames=2)
    seen = Seen(store.query(NodeQuery(partition="p")))
    assert [f.kind for f in seen.items] == [FrameKind.INITIAL]
    assert seen.errors == []
    Seen(store.write(node("p/a")))
    assert [f.kind for f in seen.items] == [FrameKind.INITIAL, FrameKind.DELTA]
    error = seen.error
    assert isinstance(error, StoreError)
    assert error.sqlstate is None
    assert isinstance(error.__cause__, ConnectionResetError)
    assert error.__cause__.errno == 104
    assert is_transient_connect_fault(error)
    assert store.injected["died_mid_stream"] == 1
    Seen(store.write(node("p/b")))
    assert len(seen.items) == 2  # nothing after death


def test_only_times_queries_die_and_others_live(store: FaultInjectingStore) -> None:
    store.die_mid_stream(after_frames=1, query=NodeQuery(partition="p"))
    other = Seen(store.query(NodeQuery(partition="q")))
    doomed = Seen(store.query(NodeQuery(partition="p")))
    survivor = Seen(store.query(NodeQuery(partition="p")))
    assert other.errors == []
    assert [f.kind for f in doomed.items] == [FrameKind.INITIAL]
    assert doomed.errors
    Seen(store.write(node("p/a")))
    assert survivor.errors == []
    assert [f.kind for f in survivor.items] == [FrameKind.INITIAL, FrameKind.DELTA]
    assert [op.outcome for op in store.operations if op.op == "query"] == [
        "forwarded",
        "doomed",
        "forwarded",
    ]


def test_a_query_can_die_before_its_initial(store: FaultInjectingStore) -> None:
    store.die_mid_stream(after_frames=0)
    seen = Seen(store.query(NodeQuery(partition="p")))
    assert seen.items == []
    assert is_transient_connect_fault(seen.error)


def test_without_the_knob_a_query_outlives_its_frames(store: FaultInjectingStore) -> None:
    seen = Seen(store.query(NodeQuery(partition="p")))
    for name in "abc":
        Seen(store.write(node(f"p/{name}")))
    assert len(seen.items) == 4
    assert seen.errors == []
    assert not seen.completed


def test_severing_ends_every_open_query_now_with_the_incidents_chain(
    store: FaultInjectingStore,
) -> None:
    first = Seen(store.query(NodeQuery(partition="p")))
    second = Seen(store.query(NodeQuery(partition="q")))
    closed = Seen(store.query(NodeQuery(partition="p")))
    closed.subscription.dispose()
    assert store.sever_open_queries() == 2
    for seen in (first, second):
        assert is_transient_connect_fault(seen.error)
        assert isinstance(seen.error.__cause__, ConnectionResetError)
    assert closed.errors == []
    assert store.injected["severed"] == 2
    later = Seen(store.query(NodeQuery(partition="p")))
    Seen(store.write(node("p/a")))
    assert later.errors == []  # only what was open then
    assert [f.kind for f in later.items] == [FrameKind.INITIAL, FrameKind.DELTA]


def test_severing_with_no_open_query_ends_nothing(store: FaultInjectingStore) -> None:
    assert store.sever_open_queries() == 0
    assert store.injected["severed"] == 0


# -- stall a provider's Initial --------------------------------------------------------------


def test_a_stalled_query_emits_nothing_until_released(store: FaultInjectingStore) -> None:
    store.stall_initial()
    seen = Seen(store.query(NodeQuery(partition="p")))
    Seen(store.write(node("p/a")))
    assert seen.items == []
    assert store.statistics().stalled_queries == 1
    assert store.release_initial() == 1
    assert [f.kind for f in seen.items] == [FrameKind.INITIAL]
    assert [n.path for n in seen.items[0].nodes] == ["p/a"]  # the state at release
    Seen(store.write(node("p/b")))
    assert [f.kind for f in seen.items] == [FrameKind.INITIAL, FrameKind.DELTA]
    assert store.injected["stalled_initial"] == 1


def test_a_stalled_query_disposed_before_release_never_starts(
    store: FaultInjectingStore, inner: InMemoryStore
) -> None:
    store.stall_initial()
    seen = Seen(store.query(NodeQuery(partition="p")))
    seen.subscription.dispose()
    store.release_initial()
    assert seen.items == []
    assert inner.statistics().live_queries == 0


def _gated_query(store: FaultInjectingStore, scheduler: TestScheduler) -> Observable[QueryFrame]:
    return fan_in(
        {"memory": store.query(NodeQuery(partition="p"))},
        initial_budget=15.0,
        scheduler=scheduler,
    )


def test_a_stalled_initial_trips_the_fan_in_gate_in_virtual_time(
    store: FaultInjectingStore,
) -> None:
    store.stall_initial()
    scheduler = TestScheduler()
    results = scheduler.start(lambda: _gated_query(store, scheduler))
    (stalled,) = results.messages
    assert stalled.time == pytest.approx(SUBSCRIBED + 15.0)
    assert isinstance(stalled.value.exception, QueryProviderStalledError)
    assert stalled.value.exception.providers == ("memory",)


def test_an_initial_released_within_the_budget_passes_the_gate(store: FaultInjectingStore) -> None:
    store.stall_initial()
    scheduler = TestScheduler()
    scheduler.schedule_absolute(SUBSCRIBED + 10.0, lambda *_: store.release_initial())
    results = scheduler.start(lambda: _gated_query(store, scheduler))
    (initial,) = results.messages
    assert initial.time == pytest.approx(SUBSCRIBED + 10.0)
    assert initial.value.value.kind is FrameKind.INITIAL


# -- hold or drop the change feed ------------------------------------------------------------


def test_a_held_feed_buffers_changes_commits_and_deltas_until_resumed(
    store: FaultInjectingStore,
) -> None:
    changes = Seen(store.changes)
    evidence = Seen(store.answers_again)
    gaps = Seen(store.gaps)
    frames = Seen(store.query(NodeQuery(partition="p")))
    store.hold_change_feed()
    Seen(store.write(node("p/a")))
    Seen(store.write(node("p/b")))
    assert changes.items == []
    assert evidence.items == []
    assert len(frames.items) == 1
    assert store.statistics().held_events == 6
    gap = store.resume_change_feed()
    assert [c.path for c in changes.items] == ["p/a", "p/b"]
    assert [type(e) for e in evidence.items] == [CommitAnnounced, CommitAnnounced, ChangeFeedGap]
    assert [[n.path for n in f.nodes] for f in frames.items[1:]] == [["p/a"], ["p/b"]]
    assert gaps.items == [gap]
    assert store.injected["held_event"] == 6
    assert store.injected["released_event"] == 6
    assert store.injected["gap_declared"] == 1


def test_a_feed_resumed_without_a_gap_announces_none(store: FaultInjectingStore) -> None:
    gaps = Seen(store.gaps)
    store.hold_change_feed()
    assert store.resume_change_feed(announce_gap=False) is None
    assert gaps.items == []


def test_a_dropped_feed_loses_events_and_a_gap_makes_queries_reread(
    store: FaultInjectingStore,
) -> None:
    Seen(store.write(node("p/gone")))
    changes = Seen(store.changes)
    frames = Seen(store.query(NodeQuery(partition="p")))
    store.drop_change_feed()
    Seen(store.write(node("p/a")))
    Seen(store.delete("p/gone"))
    assert changes.items == []
    assert len(frames.items) == 1
    assert store.injected["dropped_event"] == 4  # two changes, two query deltas
    store.resume_change_feed()
    assert changes.items == []  # lost for good
    resync = frames.items[-1]
    assert resync.kind is FrameKind.DELTA
    assert [n.path for n in resync.nodes] == ["p/a"]
    assert resync.removed == ("p/gone",)
    assert store.counts["requery"] == 1


def test_a_dropped_feed_resumed_silently_leaves_queries_stale(store: FaultInjectingStore) -> None:
    frames = Seen(store.query(NodeQuery(partition="p")))
    store.drop_change_feed()
    Seen(store.write(node("p/a")))
    store.resume_change_feed(announce_gap=False)
    assert len(frames.items) == 1  # the drill: nothing told the query it missed p/a


def test_a_gap_that_changed_nothing_emits_nothing(store: FaultInjectingStore) -> None:
    frames = Seen(store.query(NodeQuery(partition="p")))
    Seen(store.write(node("p/a")))
    store.declare_gap("nothing missed")
    assert len(frames.items) == 2
    assert store.counts["requery"] == 1


def test_inner_gaps_pass_even_while_the_feed_is_dropped(
    store: FaultInjectingStore, inner: InMemoryStore
) -> None:
    evidence = Seen(store.answers_again)
    store.drop_change_feed()
    gap = inner.declare_gap("inner resumed")
    assert evidence.items == [gap]


# -- declare a gap ---------------------------------------------------------------------------


def test_a_declared_gap_is_published_on_gaps_and_answers_again(
    store: FaultInjectingStore,
) -> None:
    gaps = Seen(store.gaps)
    evidence: Seen = Seen(store.answers_again)
    gap = store.declare_gap("listener reconnected")
    assert gaps.items == [gap]
    assert evidence.items == [gap]
    assert gap.source == store.name
    assert gap.reason == "listener reconnected"
    assert gap.lost_at <= gap.resumed_at
    assert store.injected["gap_declared"] == 1


def test_without_a_declared_gap_no_evidence_arrives(store: FaultInjectingStore) -> None:
    evidence = Seen(store.answers_again)
    store.refuse_writes_as_unreachable()
    Seen(store.write(node("p/a")))
    store.restore()
    assert evidence.items == []  # restoring announces nothing by itself


# -- the error factories and introspection ---------------------------------------------------


@pytest.mark.parametrize(
    "factory", [unreachable_error, connect_timeout_error, connection_reset_error]
)
def test_every_default_fault_is_classified_unreachable(factory: Any) -> None:
    error = factory("memory")
    assert isinstance(error, StoreError)
    assert is_transient_connect_fault(error)


def test_the_bare_causes_alone_are_not_classified_unreachable() -> None:
    for factory in (unreachable_error, connect_timeout_error, connection_reset_error):
        cause = factory("memory").__cause__
        assert cause is not None
        assert not is_transient_connect_fault(cause)  # a network frame needs its DB frame


def test_statistics_and_clear_log(store: FaultInjectingStore) -> None:
    store.refuse_writes_as_unreachable()
    Seen(store.write(node("p/a")))
    stats = store.statistics()
    assert stats.operations == 1
    assert stats.counts == {"write": 1}
    assert stats.injected == {"refused_write": 1}
    assert stats.feed_mode == "open"
    with pytest.raises(TypeError):
        stats.counts["write"] = 2  # type: ignore[index]
    store.clear_log()
    assert store.operations == []
    assert store.statistics().counts == {}


def test_knob_arguments_are_checked(store: FaultInjectingStore) -> None:
    with pytest.raises(ValueError):
        store.fault_next_read("p/a", times=0)
    with pytest.raises(ValueError):
        store.die_mid_stream(after_frames=-1)


def test_changes_and_queries_are_typed_like_the_inner_store(store: FaultInjectingStore) -> None:
    received: list[NodeChange] = []
    evidence: list[StoreEvidence] = []
    store.changes.subscribe(received.append)
    store.answers_again.subscribe(evidence.append)
    Seen(store.write(node("p/a")))
    assert [c.op for c in received] == ["upsert"]
    assert [type(e) for e in evidence] == [CommitAnnounced]
