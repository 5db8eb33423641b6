"""A live query through :class:`~rxmesh.testing.FaultInjectingStore`, once the store has decided
it: a mid-stream death, a stalled Initial, the feed gate on its deltas, a re-read after a gap it
declared."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable

from rxmesh.model import ChangeFeedGap, FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.testing._fault_errors import ExcFactory
from rxmesh.testing._fault_log import Operation

if TYPE_CHECKING:
    from rxmesh.testing._fault_store import FaultInjectingStore

__all__ = ["Death", "live_query", "subscribe_live_query"]


@dataclass
class _QueryState:
    """One subscription's progress."""

    frames: int = 0
    dead: bool = False
    initial: bool = False
    rereads: int = 0
    """Re-reads after a gap declared here, still running."""
    held: list[QueryFrame] = field(default_factory=list)
    """The inner store's deltas that came while a re-read ran, delivered after its difference."""


@dataclass
class Death:
    """A mid-stream death armed by ``die_mid_stream``."""

    after_frames: int
    factory: ExcFactory
    remaining: int
    query: NodeQuery | None


def subscribe_live_query(
    store: FaultInjectingStore,
    query: NodeQuery,
    observer: abc.ObserverBase[QueryFrame],
    scheduler: abc.SchedulerBase | None,
    death: Death | None,
    stalled: bool,
    resume_from: str | None = None,
) -> abc.DisposableBase:
    """Stream ``store.inner``'s ``query`` (resumed from ``resume_from``, if given) to
    ``observer``: die as ``death`` says, hold the start while ``stalled``, gate the deltas,
    re-read (diffed) after every gap declared here."""
    upstream = SerialDisposable()
    gap_watch = SerialDisposable()
    sink, leave = store._gate.join()
    view: dict[str, MeshNode] = {}
    state = _QueryState()
    subscription = CompositeDisposable(upstream, gap_watch, leave)

    def die() -> None:
        assert death is not None
        state.dead = True
        subscription.dispose()
        store.injected["died_mid_stream"] += 1
        observer.on_error(death.factory())

    def deliver(frame: QueryFrame) -> None:
        if state.dead:
            return
        if frame.kind is FrameKind.INITIAL:
            view.clear()
            state.initial = True
        for node in frame.nodes:
            view[node.path] = node
        for path in frame.removed:
            view.pop(path, None)
        observer.on_next(frame)
        state.frames += 1
        if death is not None and state.frames >= death.after_frames:
            die()

    def on_frame(frame: QueryFrame) -> None:
        if frame.kind is FrameKind.INITIAL:
            deliver(frame)
        elif state.rereads:
            state.held.append(frame)
        else:
            store._gate.deliver(sink, lambda: deliver(frame))

    def on_error(exc: Exception) -> None:
        if not state.dead:
            state.dead = True
            subscription.dispose()
            observer.on_error(exc)

    def sever(exc: Exception) -> None:
        if not state.dead:
            store.injected["severed"] += 1
            on_error(exc)

    store._open_queries.add(sever)
    subscription.add(Disposable(lambda: store._open_queries.discard(sever)))

    def resync(_gap: ChangeFeedGap) -> None:
        # A gap declared here (deltas dropped): the inner store knows nothing of it, so its
        # query is read again and the difference sent. The inner deltas that come meanwhile
        # wait for that difference: sent before it, a newer one would be undone by a read
        # that began earlier. (The inner store's own gaps its query recovers from itself.)
        if state.dead or not state.initial:
            return
        store.counts["requery"] += 1
        state.rereads += 1

        def diff(frame: QueryFrame) -> None:
            state.rereads -= 1
            fresh = {node.path: node for node in frame.nodes}
            changed = [n for p, n in fresh.items() if view.get(p) != n]
            removed = [p for p in view if p not in fresh]
            if changed or removed:
                deliver(QueryFrame.delta(changed, removed, provider=frame.provider))
            if not state.rereads:
                held, state.held = state.held, []
                for late in held:
                    store._gate.deliver(sink, functools.partial(deliver, late))

        store.inner.query(query).pipe(ops.take(1)).subscribe(diff, on_error, scheduler=scheduler)

    def start() -> None:
        if state.dead or subscription.is_disposed:
            return
        gap_watch.disposable = store._gaps.subscribe(resync, scheduler=scheduler)
        upstream.disposable = store.inner.query(query, resume_from).subscribe(
            on_frame, on_error, observer.on_completed, scheduler=scheduler
        )

    if death is not None and death.after_frames == 0:
        die()
    elif stalled:
        store.injected["stalled_initial"] += 1
        store._stalled.append(start)
    else:
        start()
    return subscription


def _take_death(store: FaultInjectingStore, query: NodeQuery) -> Death | None:
    """The armed death, if it applies to this subscription of ``query`` (counted down)."""
    death = store._death
    if death is None or (death.query is not None and death.query != query):
        return None
    death.remaining -= 1
    if death.remaining <= 0:
        store._death = None
    return death


def live_query(
    store: FaultInjectingStore, query: NodeQuery, resume_from: str | None = None
) -> Observable[QueryFrame]:
    """``store.query(query, resume_from)``: each subscription is decided (refused, doomed,
    stalled or forwarded) and logged, then streamed by :func:`subscribe_live_query`."""

    def subscribe(
        observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        outcome, error = store._read_decision(())
        death = None if error is not None else _take_death(store, query)
        stalled = error is None and store._stall
        if death is not None:
            outcome = "doomed"
        elif stalled:
            outcome = "stalled"
        store.operations.append(Operation("query", query, outcome))
        store.counts["query"] += 1
        if error is not None:
            observer.on_error(error)
            return Disposable()

        return subscribe_live_query(
            store, query, observer, scheduler, death, stalled, resume_from
        )

    return Observable(subscribe)
