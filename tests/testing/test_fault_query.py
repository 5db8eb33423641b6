"""A live query through the fault injector after a gap: only a gap declared by the injector (its
own dropped deltas) makes it read the query again, and the inner deltas that come while that read
runs wait for its difference.

Both tests fail against 2a183c2: the injector re-read on the inner store's gaps too (which the
inner store's own query recovers from: two recoveries racing), and it sent an inner Delta that
came during its re-read before the difference, which, computed from the older read, put a deleted
node back for good. The state machine of tests/live found it as a PostgreSQL window that kept a
deleted member after a listener cut.
"""

from __future__ import annotations

from typing import Any

from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxmesh.model import FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.providers import InMemoryStore
from rxmesh.testing import FaultInjectingStore
from tests.helpers import done

QUERY = NodeQuery(partition="p")


def fold(frames: list[QueryFrame]) -> set[str]:
    view: set[str] = set()
    for frame in frames:
        if frame.kind is FrameKind.INITIAL:
            view.clear()
        view.difference_update(frame.removed)
        view.update(node.path for node in frame.nodes)
    return view


class LateReads:
    """An embedded store whose queries, once ``late`` is set, read at subscription and deliver
    their Initial only when :meth:`release` is called: a store whose reads take time."""

    def __init__(self, inner: InMemoryStore) -> None:
        self.inner = inner
        self.late = False
        self.waiting: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def query(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]:
        if not self.late:
            return self.inner.query(query, resume_from)

        def subscribe(
            observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            read: list[QueryFrame] = []
            self.inner.query(query).subscribe(read.append).dispose()  # read now
            self.waiting.append(lambda: observer.on_next(read[0]))  # answer later
            return Disposable()

        return Observable(subscribe)

    def release(self) -> None:
        waiting, self.waiting = self.waiting, []
        for answer in waiting:
            answer()


def test_an_inner_stores_gap_is_left_to_the_inner_query() -> None:
    inner = FaultInjectingStore(InMemoryStore())
    outer = FaultInjectingStore(inner)
    frames: list[QueryFrame] = []
    subscription = outer.query(QUERY).subscribe(frames.append)
    inner.declare_gap("the inner store's own loss")
    assert inner.counts["requery"] == 1  # the inner query recovers
    assert outer.counts["requery"] == 0  # and only it
    # Negative control: a gap the outer injector declares (its own dropped deltas) re-reads.
    outer.declare_gap("the injector's own loss")
    assert outer.counts["requery"] == 1
    subscription.dispose()


def test_a_delta_that_comes_during_the_re_read_waits_for_its_difference() -> None:
    late = LateReads(InMemoryStore())
    store = FaultInjectingStore(late)  # type: ignore[arg-type]
    done(late.inner.write(MeshNode(path="p/a")))
    frames: list[QueryFrame] = []
    subscription = store.query(QUERY).subscribe(frames.append)
    store.drop_change_feed()
    done(late.inner.write(MeshNode(path="p/b")))  # its delta dropped
    late.late = True
    store.resume_change_feed()  # a gap: the query is read again (a, b), answered later
    done(late.inner.delete("p/b"))  # its delta comes while the re-read runs
    late.release()  # the difference of the older read: +b
    assert fold(frames) == {"p/a"}, [(f.kind, [n.path for n in f.nodes], f.removed) for f in frames]
    # Negative control: the last frame is the held delta; folded without it, p/b stays.
    assert fold(frames[:-1]) == {"p/a", "p/b"}
    subscription.dispose()
