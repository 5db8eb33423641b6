"""The synced-query cache: one upstream per distinct query, evicted on fault.

Why not ``share()`` or ``replay()``: reactivex's shared subjects keep a terminal error and hand it
to every later subscriber, so one transient fault would answer every future caller of that query
with the same stale error. This cache evicts a faulted chain instead, and the next caller opens a
fresh one. Nothing re-subscribes by itself: the retry decision belongs to the caller (a standing
watch re-opens through :func:`~rxmesh.operators.reopen_on_transient_fault`).

Implementation: each entry is a small hand-written multicast ("chain") built on public reactivex
API only (``Observable`` and disposables): a dictionary of subscribed observers, the latest frame,
a manual reference count, and an idle timer on the scheduler. A chain is never re-connected:
once released, evicted or terminated it is dead, and the next ``get`` builds a new one.

Cost: with ``replay=fold_query_frames`` the chain keeps the snapshot incrementally (a dict by path,
see :class:`QuerySnapshot`), so a delta costs O(change); the ordered Initial is materialised only
when a late subscriber joins. A chain nobody listens to does no work: while it waits out its idle
grace it only queues the frames (bounded), and folds them if somebody joins again.

Resumes: ``get(query, resume_from=token)`` is answered by the shared chain when its latest frame
carries exactly that token (a resumed, empty Delta, then the chain's frames); otherwise by a
private upstream opened with ``open_resumed(query, token)``, which is neither shared nor cached:
only the store can say what changed since a position the chain has moved past (or never held).

The layout: this module is the cache; ``_snapshot`` folds a live query's frames into the
snapshot a late subscriber starts from, one delta at a time.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SerialDisposable

from rxmesh._util.scheduling import resolve_scheduler
from rxmesh.cache._snapshot import QuerySnapshot
from rxmesh.exceptions import MeshDisposedError
from rxmesh.faults import is_store_unreachable
from rxmesh.instrumentation import _events
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.model import FrameKind, QueryFrame

__all__ = ["SyncedQueryCache", "fold_query_frames"]

Q = TypeVar("Q", bound=Hashable)
T = TypeVar("T")

DEFAULT_IDLE_GRACE = 30.0
"""Seconds a chain with no subscriber is kept before it is released and its entry removed."""

DEFAULT_IDLE_BACKLOG = 1024
"""Rows (or frames, for a replay that cannot say its size) an idle chain may queue unfolded; past
``max(DEFAULT_IDLE_BACKLOG, size of the replayed state)`` it is released at once: folding the
backlog would cost more than a fresh upstream."""


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    """A snapshot of a :class:`SyncedQueryCache`.

    Attributes:
        entries: distinct queries with a live chain in the cache now.
        subscribers: subscriptions currently attached to any chain (evicted ones included).
        upstream_subscriptions: upstreams opened since the cache was built.
        evictions: chains evicted because they failed, completed, or carried a silent provider.
        releases: chains released after their idle grace (or at once when evicted and idle).
        folded: frames folded into a replayed state (the per-delta work of the cache).
        deferred: frames an idle chain queued instead of folding them.
        resumed_on_chain: resumes answered by a shared chain at exactly that token.
        resumed_upstreams: resumes answered by a private upstream (``open_resumed``).
    """

    entries: int
    subscribers: int
    upstream_subscriptions: int
    evictions: int
    releases: int
    folded: int = 0
    deferred: int = 0
    resumed_on_chain: int = 0
    resumed_upstreams: int = 0


def fold_query_frames(state: QueryFrame, frame: QueryFrame) -> QueryFrame:
    """Fold a frame into the replayed state, so a late subscriber gets a snapshot, not a delta.

    An Initial replaces the state; a Delta is applied to it (removals, then upserts) and the
    result is an Initial ordered by path that keeps the state's ``silent_providers``. Pass it as
    ``SyncedQueryCache(open_query, replay=fold_query_frames)``: the cache recognises it and keeps
    the same state incrementally in a :class:`QuerySnapshot` (O(change) per delta) instead of
    calling it, which would rebuild and re-sort the whole snapshot on every delta.
    """
    snapshot = QuerySnapshot(state)
    snapshot.fold(frame)
    return snapshot.value()


_REPLAY = object()
"""``_join``'s ``first`` for a plain subscriber: the chain's replayed state."""


class _MarkedReset(abc.ObserverBase[T]):
    """Marks the first frame ``reset`` (a resume joined to a chain that has no frame yet)."""

    __slots__ = ("_marked", "_observer")

    def __init__(self, observer: abc.ObserverBase[T]) -> None:
        self._observer = observer
        self._marked = False

    def on_next(self, value: T) -> None:
        if not self._marked:
            self._marked = True
            if isinstance(value, QueryFrame) and value.kind is FrameKind.INITIAL:
                value = cast(T, value.model_copy(update={"reset": True}))
        self._observer.on_next(value)

    def on_error(self, error: Exception) -> None:
        self._observer.on_error(error)

    def on_completed(self) -> None:
        self._observer.on_completed()


class _Chain(Generic[T]):
    """One upstream subscription multicast to many observers; never re-connected."""

    __slots__ = (
        "backlog",
        "backlog_rows",
        "evicted",
        "has_value",
        "idle",
        "idle_timer",
        "key",
        "latest",
        "observers",
        "snapshot",
        "state",
        "terminated",
        "token",
        "upstream",
    )

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.observers: dict[int, abc.ObserverBase[T]] = {}
        self.snapshot: tuple[abc.ObserverBase[T], ...] | None = ()
        self.latest: Any = None
        self.state: QuerySnapshot | None = None
        self.has_value = False
        self.token: str | None = None
        """The ``resume_token`` of the latest frame from upstream (folded or not)."""
        self.evicted = False
        self.terminated = False
        self.idle = False
        self.backlog: list[T] = []
        self.backlog_rows = 0
        self.upstream = SerialDisposable()
        self.idle_timer = SerialDisposable()

    def targets(self) -> tuple[abc.ObserverBase[T], ...]:
        snapshot = self.snapshot
        if snapshot is None:
            snapshot = self.snapshot = tuple(self.observers.values())
        return snapshot

    def replayed(self) -> T:
        return cast(T, self.state.value()) if self.state is not None else cast(T, self.latest)


class SyncedQueryCache(Generic[Q, T]):
    """One upstream per distinct query, shared by all subscribers; evicted on fault.

    - ``get(query)`` returns a lazy observable; each subscription joins the query's current chain,
      or builds one (calling ``open_query(query)`` and subscribing it once).
    - A late subscriber first receives the latest frame (or the folded state, see ``replay``).
    - A chain that fails is evicted (only if the key still maps to that very chain); its
      subscribers receive the error; the next subscription opens a fresh upstream. A chain that
      completes is evicted the same way (a finished query is not live, so it is not cached).
    - A frame whose ``silent_providers`` is non-empty is delivered but evicts its chain: an answer
      nobody gave is not cached. Subscribers already on that chain stay on it.
    - When the last subscriber leaves, the chain is released after ``idle_grace`` seconds (at
      once if it was evicted) and its entry removed; a subscription within the grace reuses it.
      Meanwhile the chain does no work: it queues the frames unfolded (folding them if somebody
      joins) and is released at once when that backlog outgrows :data:`DEFAULT_IDLE_BACKLOG`
      rows or the snapshot, whichever is larger.
    - :meth:`dispose` releases every chain at once (their subscribers complete) and refuses
      later subscriptions with :class:`~rxmesh.exceptions.MeshDisposedError`.
    - ``get(query, resume_from=token)``: see the module ("Resumes"). Without ``open_resumed``
      a token the chain is not at gets the chain's snapshot marked ``reset``.

    Args:
        open_query: builds the (cold) upstream of one query, e.g. a :func:`fan_in` of providers.
        idle_grace: seconds to keep an idle chain (>= 0; 0 releases at once).
        scheduler: where the idle timers run; else the subscription's scheduler, else the running
            asyncio loop.
        replay: how the replayed value follows the frames, ``replay(state, frame) -> state``;
            ``None`` replays the latest frame. :func:`fold_query_frames` replays a snapshot
            (kept incrementally, see :class:`QuerySnapshot`).
        open_resumed: builds a private upstream resumed from a token,
            ``open_resumed(query, token)`` (e.g. ``lambda q, t: mesh.query(q, resume_from=t)``).

    Example:
        >>> cache = SyncedQueryCache(lambda q: fan_in(providers_for(q)))  # doctest: +SKIP
        >>> cache.get(NodeQuery(node_type="NodeType")).subscribe(print)  # doctest: +SKIP
    """

    def __init__(
        self,
        open_query: Callable[[Q], Observable[T]],
        *,
        idle_grace: float = DEFAULT_IDLE_GRACE,
        scheduler: abc.SchedulerBase | None = None,
        replay: Callable[[T, T], T] | None = None,
        open_resumed: Callable[[Q, str], Observable[T]] | None = None,
    ) -> None:
        if not callable(open_query):
            raise TypeError(f"open_query must be callable, got {type(open_query).__name__}")
        if isinstance(idle_grace, bool) or not isinstance(idle_grace, int | float):
            raise TypeError(f"idle_grace must be a number of seconds, got {idle_grace!r}")
        if not (idle_grace >= 0 and math.isfinite(idle_grace)):
            raise ValueError(
                f"idle_grace must be a finite number of seconds >= 0, got {idle_grace}"
            )
        if replay is not None and not callable(replay):
            raise TypeError(f"replay must be callable, got {type(replay).__name__}")
        if open_resumed is not None and not callable(open_resumed):
            raise TypeError(f"open_resumed must be callable, got {type(open_resumed).__name__}")
        self._open_query = open_query
        self._open_resumed = open_resumed
        self._resumed_on_chain = 0
        self._resumed_upstreams = 0
        self._idle_grace = float(idle_grace)
        self._scheduler = scheduler
        self._replay = replay
        self._lock = threading.RLock()
        self._entries: dict[Hashable, _Chain[T]] = {}
        self._next_token = 0
        self._subscribers = 0
        self._upstreams = 0
        self._evictions = 0
        self._releases = 0
        self._folded = 0
        self._deferred = 0
        self._disposed = False
        self._chains: dict[int, _Chain[T]] = {}
        """Every chain not yet released or terminated (evicted ones included), by id."""

    def get(self, query: Q, resume_from: str | None = None) -> Observable[T]:
        """The live, shared stream of ``query`` (lazy: nothing opens until a subscription);
        with ``resume_from``, resumed from that token (see the module, "Resumes")."""
        hash(query)  # refuse an unhashable query here, not at subscribe time

        def subscribe(
            observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            if resume_from is None:
                return self._join(query, observer, scheduler, first=_REPLAY)
            return self._resume(query, resume_from, observer, scheduler)

        return Observable(subscribe)

    def _resume(
        self,
        query: Q,
        token: str,
        observer: abc.ObserverBase[T],
        scheduler: abc.SchedulerBase | None,
    ) -> abc.DisposableBase:
        with self._lock:
            chain = self._entries.get(query)
            if chain is not None and not self._disposed and chain.token == token:
                # The chain stands exactly there: nothing changed since, and the chain goes on.
                self._resumed_on_chain += 1
                here = QueryFrame(kind=FrameKind.DELTA, resume_token=token, resumed=True)
                return self._join(query, observer, scheduler, first=here)
            if self._open_resumed is None or self._disposed:
                return self._join(query, observer, scheduler, first=None)
            self._resumed_upstreams += 1
        # Not shared, not cached: what changed since the token is this subscriber's alone.
        try:
            private = self._open_resumed(query, token)
        except Exception as exc:  # noqa: BLE001 - delivered as the subscription's error
            observer.on_error(exc)
            return Disposable()
        return private.subscribe(observer, scheduler=scheduler)

    def statistics(self) -> CacheStatistics:
        """A frozen snapshot of the cache's counters."""
        with self._lock:
            return CacheStatistics(
                entries=len(self._entries),
                subscribers=self._subscribers,
                upstream_subscriptions=self._upstreams,
                evictions=self._evictions,
                releases=self._releases,
                folded=self._folded,
                deferred=self._deferred,
                resumed_on_chain=self._resumed_on_chain,
                resumed_upstreams=self._resumed_upstreams,
            )

    def dispose(self) -> None:
        """Release every chain now: upstreams and idle timers disposed, entries removed, each
        subscriber completed. Later subscriptions error with ``MeshDisposedError``. Idempotent.
        """
        with self._lock:
            self._disposed = True
            for chain in list(self._chains.values()):
                targets = chain.targets()
                self._subscribers -= len(chain.observers)
                chain.observers.clear()
                chain.snapshot = ()
                self._release(chain)
                for target in targets:
                    target.on_completed()

    # -- internals -------------------------------------------------------------------------

    def _join(
        self,
        query: Q,
        observer: abc.ObserverBase[T],
        scheduler: abc.SchedulerBase | None,
        *,
        first: object = None,
    ) -> abc.DisposableBase:
        """Join ``query``'s chain. ``first``: what the subscriber gets before the chain's
        frames: the replayed state (``_REPLAY``), that very value, or (``None``) the replayed
        state marked ``reset`` (a resume the cache cannot answer otherwise)."""
        with self._lock:
            if self._disposed:
                observer.on_error(MeshDisposedError("the synced-query cache was disposed"))
                return Disposable()
            chain = self._entries.get(query)
            fresh = chain is None
            if chain is None:
                chain = _Chain(query)
                self._entries[query] = chain
                self._chains[id(chain)] = chain
            chain.idle_timer.disposable = None  # a subscription within the grace reuses it
            if chain.idle:
                chain.idle = False
                backlog, chain.backlog, chain.backlog_rows = chain.backlog, [], 0
                for value in backlog:
                    self._remember(chain, value)
            if first is not _REPLAY and first is not None:
                observer.on_next(cast(T, first))
            elif chain.has_value:
                replayed = chain.replayed()
                if first is None and isinstance(replayed, QueryFrame):
                    replayed = cast(T, replayed.model_copy(update={"reset": True}))
                observer.on_next(replayed)
            elif first is None:
                observer = _MarkedReset(observer)
            token = self._next_token
            self._next_token += 1
            chain.observers[token] = observer
            chain.snapshot = None
            self._subscribers += 1
            if fresh:
                self._connect(chain, query, scheduler)

        def leave() -> None:
            with self._lock:
                if chain.observers.pop(token, None) is None:
                    return
                chain.snapshot = None
                self._subscribers -= 1
                if not chain.observers and not chain.terminated:
                    self._idle(chain, scheduler)

        return Disposable(leave)

    def _remember(self, chain: _Chain[T], value: T) -> None:
        """Fold ``value`` into the replayed state (lock held)."""
        replay = self._replay
        if replay is None or not chain.has_value:
            chain.has_value = True
            if replay is fold_query_frames and isinstance(value, QueryFrame):
                chain.state = QuerySnapshot(value)
            else:
                chain.latest = value
        elif chain.state is not None:
            chain.state.fold(cast(QueryFrame, value))
        else:
            chain.latest = replay(chain.latest, value)
        if replay is not None:
            self._folded += 1

    def _defer(self, chain: _Chain[T], value: T) -> None:
        """Nobody listens to ``chain``: queue ``value`` unfolded, or give the chain up (lock
        held). With no replay the latest frame is all there is to keep."""
        self._deferred += 1
        if self._replay is None:
            chain.latest, chain.has_value = value, True
            return
        chain.backlog.append(value)  # grown by the frame's rows (at least 1)
        chain.backlog_rows += max(
            1, len(getattr(value, "nodes", ())) + len(getattr(value, "removed", ()))
        )
        size = chain.state.size() if chain.state is not None else 0
        if chain.backlog_rows > max(DEFAULT_IDLE_BACKLOG, size):
            self._release(chain)

    def _connect(self, chain: _Chain[T], query: Q, scheduler: abc.SchedulerBase | None) -> None:
        def on_next(value: T) -> None:
            with self._lock:
                if chain.terminated:
                    return
                chain.token = getattr(value, "resume_token", None)
                silent = getattr(value, "silent_providers", None)
                if chain.idle and not silent:
                    self._defer(chain, value)
                    return
                self._remember(chain, value)
                if silent:
                    logger.bind(query=repr(chain.key), silent_providers=list(silent)).warning(
                        "query {!r}: provider(s) {} gave no real answer; the frame is delivered "
                        "but not cached",
                        chain.key,
                        ", ".join(map(str, silent)),
                    )
                    self._evict(chain)
                    if chain.idle:  # evicted and nobody listens: nobody can rejoin it
                        self._release(chain)
                for target in chain.targets():
                    target.on_next(value)

        def on_error(error: Exception) -> None:
            with self._lock:
                if chain.terminated:
                    return
                targets = self._terminate(chain, error)
                log = logger.bind(query=repr(chain.key), error_type=type(error).__name__)
                if is_store_unreachable(error):
                    log.error(
                        "query {!r}: the store could not be reached ({}); chain evicted, the "
                        "next subscription opens a fresh upstream",
                        chain.key,
                        error,
                    )
                else:
                    log.warning(
                        "query {!r} failed ({}: {}); chain evicted",
                        chain.key,
                        type(error).__name__,
                        error,
                    )
                for target in targets:
                    target.on_error(error)

        def on_completed() -> None:
            with self._lock:
                if chain.terminated:
                    return
                for target in self._terminate(chain):
                    target.on_completed()

        try:
            opened = self._open_query(query)
            self._upstreams += 1
            if _instrumentation.enabled:
                _instrumentation.emit(_events.CacheChainBuilt())
            subscription = opened.subscribe(on_next, on_error, on_completed, scheduler=scheduler)
        except Exception as exc:  # noqa: BLE001 - delivered as the chain's error, never swallowed
            on_error(exc)
            return
        if chain.terminated:
            subscription.dispose()
        else:
            chain.upstream.disposable = subscription

    def _terminate(
        self, chain: _Chain[T], error: Exception | None = None
    ) -> tuple[abc.ObserverBase[T], ...]:
        """Mark ``chain`` dead, evict it, detach and return its observers (lock held)."""
        chain.terminated = True
        self._chains.pop(id(chain), None)
        self._evict(chain, "completed" if error is None else "fault", error)
        targets = chain.targets()
        self._subscribers -= len(chain.observers)
        chain.observers.clear()
        chain.snapshot = ()
        chain.idle_timer.dispose()
        chain.upstream.dispose()
        return targets

    def _evict(
        self, chain: _Chain[T], cause: str = "silent_provider", error: Exception | None = None
    ) -> None:
        """Remove ``chain``'s entry, only if the key still maps to that very chain (lock held)."""
        if chain.evicted:
            return
        chain.evicted = True
        if self._entries.get(chain.key) is chain:
            del self._entries[chain.key]
            self._evictions += 1
            if _instrumentation.enabled:
                _instrumentation.emit(
                    _events.CacheChainEvicted(cause=cause, unreachable=is_store_unreachable(error))
                )

    def _idle(self, chain: _Chain[T], scheduler: abc.SchedulerBase | None) -> None:
        """The last subscriber left ``chain`` (lock held): release now or after the grace."""
        if chain.evicted or self._idle_grace == 0:
            self._release(chain)
            return
        chain.idle = True  # from now on frames are queued, not folded

        def release(_: abc.SchedulerBase, __: Any = None) -> None:
            with self._lock:
                if not chain.observers and not chain.terminated:
                    self._release(chain)

        when = resolve_scheduler(self._scheduler, scheduler)
        chain.idle_timer.disposable = when.schedule_relative(self._idle_grace, release)

    def _release(self, chain: _Chain[T]) -> None:
        if chain.terminated:
            return
        chain.terminated = True
        chain.idle = False
        chain.backlog, chain.backlog_rows, chain.state, chain.latest = [], 0, None, None
        self._chains.pop(id(chain), None)
        if self._entries.get(chain.key) is chain:
            del self._entries[chain.key]
        chain.evicted = True
        chain.idle_timer.dispose()
        chain.upstream.dispose()
        self._releases += 1
