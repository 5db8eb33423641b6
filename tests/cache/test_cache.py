"""SyncedQueryCache (SPEC §7): one upstream per query, evicted on fault, released when idle."""

from __future__ import annotations

import random
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops
from reactivex.subject import Subject
from reactivex.testing import TestScheduler

from rxmesh._util.path_order import path_ordered
from rxmesh.cache import (
    DEFAULT_IDLE_BACKLOG,
    DEFAULT_IDLE_GRACE,
    SyncedQueryCache,
    fold_query_frames,
)
from rxmesh.exceptions import MeshDisposedError, StoreError
from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame

Q = NodeQuery(node_type="NodeType")


def connect_fault() -> StoreError:
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except OSError as exc:
            raise StoreError("lost connection to postgres@db:5432", sqlstate="08006") from exc
    except StoreError as err:
        return err


def initial(*paths: str, silent: tuple[str, ...] = ()) -> QueryFrame:
    frame = QueryFrame.initial([MeshNode(path=p) for p in paths])
    return frame.model_copy(update={"silent_providers": silent}) if silent else frame


class Upstreams:
    """An ``open_query`` that hands out a fresh hot Subject per call and counts the calls."""

    def __init__(self) -> None:
        self.opened: list[Subject[QueryFrame]] = []
        self.subscriptions = 0

    def __call__(self, query: NodeQuery) -> Observable[QueryFrame]:
        subject: Subject[QueryFrame] = Subject()
        self.opened.append(subject)

        def subscribe(observer: Any, scheduler: Any = None) -> Any:
            self.subscriptions += 1
            return subject.subscribe(observer, scheduler=scheduler)

        return Observable(subscribe)

    @property
    def last(self) -> Subject[QueryFrame]:
        return self.opened[-1]


class Recorder:
    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.errors: list[Exception] = []
        self.completed = False

    def attach(self, source: Observable[Any], scheduler: Any = None) -> Any:
        return source.subscribe(
            self.frames.append,
            self.errors.append,
            lambda: setattr(self, "completed", True),
            scheduler=scheduler,
        )


def test_the_default_idle_grace_is_a_readable_constant() -> None:
    assert DEFAULT_IDLE_GRACE == 30.0


def test_an_answered_frame_is_cached_and_replayed_to_a_late_subscriber() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    first, late = Recorder(), Recorder()

    first.attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a"))
    late.attach(cache.get(Q))  # a second get opens nothing

    assert upstreams.subscriptions == 1
    assert late.frames == first.frames == [initial("p/a")]
    delta = QueryFrame.delta([MeshNode(path="p/b")])
    upstreams.last.on_next(delta)
    assert first.frames[-1] == late.frames[-1] == delta
    stats = cache.statistics()
    assert (stats.entries, stats.subscribers, stats.upstream_subscriptions) == (1, 2, 1)
    assert stats.evictions == 0


def test_a_faulted_chain_is_evicted_and_the_next_get_opens_a_new_upstream() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    a, b = Recorder(), Recorder()
    a.attach(cache.get(Q))
    b.attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a"))
    fault = connect_fault()

    upstreams.last.on_error(fault)

    assert a.errors == [fault] and b.errors == [fault]  # current subscribers get the error
    assert a.errors[0] is fault
    assert cache.statistics().entries == 0
    assert cache.statistics().evictions == 1
    assert upstreams.subscriptions == 1  # nothing re-subscribes by itself

    again = Recorder()
    again.attach(cache.get(Q))
    assert upstreams.subscriptions == 2  # a fresh upstream, not a replayed error
    assert again.errors == [] and again.frames == []
    upstreams.last.on_next(initial("p/a"))
    assert again.frames == [initial("p/a")]


def test_a_frame_naming_silent_providers_is_delivered_but_not_cached() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    first = Recorder()
    first.attach(cache.get(Q))
    unanswered = initial("p/a", silent=("partition-b",))

    upstreams.last.on_next(unanswered)

    assert first.frames == [unanswered]  # delivered
    assert cache.statistics().entries == 0  # but not cached
    later = Recorder()
    later.attach(cache.get(Q))
    assert upstreams.subscriptions == 2
    assert later.frames == []  # the unanswered frame is not replayed
    # The first subscriber stays on its chain and keeps receiving it.
    delta = QueryFrame.delta([MeshNode(path="p/c")])
    upstreams.opened[0].on_next(delta)
    assert first.frames[-1] == delta
    assert later.frames == []


def test_an_old_chains_late_error_does_not_evict_the_new_chain() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    old = Recorder()
    old.attach(cache.get(Q))
    upstreams.opened[0].on_next(initial("p/a", silent=("b",)))  # evicts chain 1, still live
    new = Recorder()
    new.attach(cache.get(Q))
    upstreams.opened[1].on_next(initial("p/a"))

    upstreams.opened[0].on_error(connect_fault())  # the old chain fails late

    assert len(old.errors) == 1
    assert new.errors == []
    assert cache.statistics().entries == 1  # pair-exact: the new chain stays
    third = Recorder()
    third.attach(cache.get(Q))
    assert upstreams.subscriptions == 2
    assert third.frames == [initial("p/a")]


def test_the_last_subscriber_leaving_releases_the_chain_after_the_grace() -> None:
    scheduler = TestScheduler()
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, idle_grace=30.0, scheduler=scheduler)
    subscription = Recorder().attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a"))

    scheduler.advance_to(10)
    subscription.dispose()
    scheduler.advance_to(39.9)
    assert cache.statistics().entries == 1
    assert upstreams.last.observers  # still connected inside the grace
    scheduler.advance_to(40)
    assert cache.statistics().entries == 0
    assert cache.statistics().releases == 1
    assert not upstreams.last.observers  # the upstream is disposed

    later = Recorder()
    later.attach(cache.get(Q))
    assert upstreams.subscriptions == 2  # a NEW chain
    assert later.frames == []  # never a stale frame from the old replay


def test_resubscribing_within_the_grace_reuses_the_chain() -> None:
    scheduler = TestScheduler()
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=scheduler)
    subscription = Recorder().attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a"))
    subscription.dispose()

    scheduler.advance_to(29)
    back = Recorder()
    back.attach(cache.get(Q))
    scheduler.advance_to(1000)  # the cancelled idle timer never fires

    assert upstreams.subscriptions == 1
    assert back.frames == [initial("p/a")]
    assert cache.statistics().entries == 1
    assert cache.statistics().releases == 0


def test_an_evicted_chain_is_released_at_once_when_its_last_subscriber_leaves() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    subscription = Recorder().attach(cache.get(Q))
    upstreams.last.on_next(initial(silent=("b",)))

    subscription.dispose()

    assert not upstreams.last.observers
    assert cache.statistics().releases == 1


def test_a_completed_chain_is_not_cached() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    first = Recorder()
    first.attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a"))
    upstreams.last.on_completed()

    assert first.completed
    Recorder().attach(cache.get(Q))
    assert upstreams.subscriptions == 2


def test_a_failure_to_open_the_query_is_delivered_and_not_cached() -> None:
    calls = 0
    fault = connect_fault()

    def open_query(query: NodeQuery) -> Observable[QueryFrame]:
        nonlocal calls
        calls += 1
        raise fault

    cache = SyncedQueryCache(open_query, scheduler=TestScheduler())
    first, second = Recorder(), Recorder()
    first.attach(cache.get(Q))
    second.attach(cache.get(Q))
    assert first.errors == [fault] and second.errors == [fault]
    assert calls == 2
    assert cache.statistics().entries == 0


def test_distinct_queries_get_distinct_upstreams() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    Recorder().attach(cache.get(Q))
    Recorder().attach(cache.get(NodeQuery(node_type="NodeType")))  # equal -> same chain
    Recorder().attach(cache.get(NodeQuery(node_type="Other")))
    assert upstreams.subscriptions == 2
    assert cache.statistics().entries == 2


def test_the_fold_replays_a_snapshot_instead_of_the_last_delta() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler(), replay=fold_query_frames)
    Recorder().attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a", "p/b"))
    upstreams.last.on_next(QueryFrame.delta([MeshNode(path="p/c")], removed=["p/a"]))

    late = Recorder()
    late.attach(cache.get(Q))

    (replayed,) = late.frames
    assert replayed.kind is FrameKind.INITIAL
    assert [n.path for n in replayed.nodes] == ["p/b", "p/c"]


@pytest.mark.parametrize("grace", [-1.0, float("inf"), float("nan")])
def test_an_idle_grace_that_no_timer_can_wait_is_refused(grace: float) -> None:
    with pytest.raises(ValueError, match="idle_grace"):
        SyncedQueryCache(Upstreams(), idle_grace=grace)


# -- why the cache exists -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shared", "stale_frames"),
    [
        pytest.param(lambda src: src.pipe(ops.share()), [], id="share"),
        pytest.param(
            lambda src: src.pipe(ops.replay(buffer_size=1), ops.ref_count()),
            [initial("p/a")],
            id="replay",
        ),
    ],
)
def test_reactivex_sharing_keeps_the_error_and_replays_it_to_the_next_subscriber(
    shared: Any, stale_frames: list[QueryFrame]
) -> None:
    """The bug the cache prevents (reactivex 6.1, measured): after a fault, the next caller of a
    shared chain gets the OLD error (and, with replay, the stale frame), even though reactivex
    re-subscribed a fresh, healthy upstream underneath."""
    fault = connect_fault()
    upstreams = Upstreams()  # cold: every subscription gets a fresh, healthy upstream

    hot = shared(Observable(lambda observer, scheduler=None: upstreams(Q).subscribe(observer)))
    first = Recorder()
    first.attach(hot)
    upstreams.last.on_next(initial("p/a"))
    upstreams.last.on_error(fault)
    assert first.errors == [fault]

    next_caller = Recorder()
    next_caller.attach(hot)

    assert len(upstreams.opened) == 2  # a fresh upstream was opened...
    assert next_caller.errors == [fault]  # ...but the caller is answered with the latched fault
    assert next_caller.errors[0] is fault
    assert next_caller.frames == stale_frames
    upstreams.last.on_next(initial("p/b"))
    assert next_caller.frames == stale_frames  # and never hears the healthy upstream


def test_the_cache_does_not_latch_the_error_where_share_does() -> None:
    """The control of the test above, through the cache with the same upstream shape."""
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler())
    Recorder().attach(cache.get(Q))
    upstreams.last.on_error(connect_fault())
    next_caller = Recorder()
    next_caller.attach(cache.get(Q))
    assert next_caller.errors == []
    assert upstreams.subscriptions == 2


def test_a_cold_observable_under_the_cache_is_subscribed_once_for_many_subscribers() -> None:
    opened = 0

    def open_query(query: NodeQuery) -> Observable[QueryFrame]:
        nonlocal opened
        opened += 1
        return reactivex.never()

    cache = SyncedQueryCache(open_query, scheduler=TestScheduler())
    for _ in range(50):
        Recorder().attach(cache.get(Q))
    assert opened == 1
    assert cache.statistics().subscribers == 50


# -- the incremental snapshot (issue 16, item 1) ------------------------------------------------


def _rebuilt(state: QueryFrame, frame: QueryFrame) -> QueryFrame:
    """The old fold, the reference: rebuild and re-sort the whole snapshot on every delta."""
    if frame.kind is FrameKind.INITIAL or state.kind is not FrameKind.INITIAL:
        return frame
    nodes = {node.path: node for node in state.nodes}
    for path in frame.removed:
        nodes.pop(path, None)
    for node in frame.nodes:
        nodes[node.path] = node
    return state.model_copy(update={"nodes": tuple(nodes[path] for path in sorted(nodes))})


def _random_frames(seed: int, count: int) -> list[QueryFrame]:
    rng = random.Random(seed)
    paths = [f"p/{rng.randrange(60):02d}" for _ in range(200)]
    frames = [QueryFrame.initial([MeshNode(path=p) for p in set(paths[:20])], provider="x")]
    for version in range(1, count):
        upserts = {
            p: MeshNode(path=p, version=version) for p in rng.sample(paths, rng.randrange(4))
        }
        removed = rng.sample(paths, rng.randrange(3))
        frames.append(QueryFrame.delta(list(upserts.values()), removed))
    return frames


def _marked(frame: QueryFrame) -> QueryFrame:
    """``frame`` as a store sends it: its checked order carried by its nodes (``PathOrdered``)."""
    ordered = path_ordered(frame.nodes)
    assert ordered is not None
    return QueryFrame.model_construct(**{**dict(frame), "nodes": ordered})


@pytest.mark.parametrize("marked", [False, True], ids=["unchecked", "path-ordered"])
@pytest.mark.parametrize("seed", range(8))
def test_the_incremental_snapshot_replays_what_the_full_rebuild_would(
    seed: int, marked: bool
) -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler(), replay=fold_query_frames)
    Recorder().attach(cache.get(Q))
    reference: QueryFrame | None = None
    frames = _random_frames(seed, 120)
    if marked:
        frames[0] = _marked(frames[0])
        assert frames[0] == _random_frames(seed, 1)[0]  # the same frame to everyone else
    for index, frame in enumerate(frames):
        upstreams.last.on_next(frame)
        reference = frame if reference is None else _rebuilt(reference, frame)
        if index % 7 == 0:  # a late subscriber now and then materialises the snapshot
            late = Recorder()
            late.attach(cache.get(Q))
            assert late.frames == [reference]
    late = Recorder()
    late.attach(cache.get(Q))
    assert late.frames == [reference]
    assert fold_query_frames(_random_frames(seed, 1)[0], QueryFrame.delta(removed=["p/00"])) == (
        _rebuilt(_random_frames(seed, 1)[0], QueryFrame.delta(removed=["p/00"]))
    )


def test_a_delta_does_not_rebuild_the_snapshot_only_a_late_subscriber_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression (issue 16): the old fold rebuilt and re-sorted the whole snapshot on every delta,
    so this test fails against it (1000 materialisations instead of 1)."""
    built: list[int] = []
    real = QueryFrame.model_copy

    def counting_copy(self: QueryFrame, **kwargs: Any) -> QueryFrame:
        if self.kind is FrameKind.INITIAL:
            built.append(len(kwargs.get("update", {}).get("nodes", ())))
        return real(self, **kwargs)

    monkeypatch.setattr(QueryFrame, "model_copy", counting_copy)
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler(), replay=fold_query_frames)
    Recorder().attach(cache.get(Q))
    upstreams.last.on_next(QueryFrame.initial([MeshNode(path=f"p/{i:05d}") for i in range(5000)]))
    for i in range(1000):
        upstreams.last.on_next(QueryFrame.delta([MeshNode(path=f"p/n{i:04d}")]))
    assert built == []  # no delta materialised anything

    first, second = Recorder(), Recorder()
    first.attach(cache.get(Q))
    second.attach(cache.get(Q))  # nothing changed in between: the same frame, built once
    assert built == [6000]  # the negative control: a late subscriber does build it, once
    assert first.frames[0] is second.frames[0]
    assert cache.statistics().folded == 1001


# -- idle costs nothing (issue 16, item 2) -------------------------------------------------------


def test_an_idle_chain_queues_frames_unfolded_and_folds_them_when_a_subscriber_returns() -> None:
    """Regression (issue 16): the old chain folded every delta for the whole idle grace."""
    scheduler = TestScheduler()
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=scheduler, replay=fold_query_frames)
    subscription = Recorder().attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a", "p/b"))
    folded = cache.statistics().folded
    subscription.dispose()

    upstreams.last.on_next(QueryFrame.delta([MeshNode(path="p/c")], removed=["p/a"]))
    upstreams.last.on_next(QueryFrame.delta([MeshNode(path="p/d")]))

    assert cache.statistics().folded == folded  # no work while nobody listens
    assert cache.statistics().deferred == 2
    back = Recorder()
    back.attach(cache.get(Q))
    assert [n.path for n in back.frames[0].nodes] == ["p/b", "p/c", "p/d"]  # nothing lost
    assert cache.statistics().folded == folded + 2  # folded once somebody needs them
    assert upstreams.subscriptions == 1


def test_an_idle_backlog_past_its_bound_releases_the_chain_at_once() -> None:
    scheduler = TestScheduler()
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=scheduler, replay=fold_query_frames)
    subscription = Recorder().attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a"))
    subscription.dispose()
    bulk = [MeshNode(path=f"p/{i:05d}") for i in range(DEFAULT_IDLE_BACKLOG)]
    upstreams.last.on_next(QueryFrame.delta(bulk))  # exactly at the bound: still kept
    assert upstreams.last.observers and cache.statistics().releases == 0  # negative control

    upstreams.last.on_next(QueryFrame.delta([MeshNode(path="p/over")]))

    assert not upstreams.last.observers  # released long before the 30 s grace
    assert cache.statistics().releases == 1 and cache.statistics().entries == 0
    Recorder().attach(cache.get(Q))
    assert upstreams.subscriptions == 2  # a fresh upstream, never the stale backlog


def test_disposing_the_cache_releases_every_chain_and_completes_its_subscribers() -> None:
    upstreams = Upstreams()
    cache = SyncedQueryCache(upstreams, scheduler=TestScheduler(), replay=fold_query_frames)
    live, idle, evicted = Recorder(), Recorder(), Recorder()
    live.attach(cache.get(Q))
    upstreams.last.on_next(initial("p/a"))
    idle.attach(cache.get(NodeQuery(node_type="Other"))).dispose()  # waiting out its grace
    evicted.attach(cache.get(NodeQuery(node_type="Third")))
    upstreams.last.on_next(initial(silent=("b",)))  # evicted, still has a subscriber
    assert all(subject.observers for subject in upstreams.opened)  # negative control

    cache.dispose()

    assert not any(subject.observers for subject in upstreams.opened)
    assert live.completed and evicted.completed
    assert live.errors == [] and evicted.errors == []
    stats = cache.statistics()
    assert (stats.entries, stats.subscribers) == (0, 0)
    after = Recorder()
    after.attach(cache.get(Q))
    assert upstreams.subscriptions == 3  # nothing opened after the dispose
    assert [type(e) for e in after.errors] == [MeshDisposedError]
    cache.dispose()  # idempotent
