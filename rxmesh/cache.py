"""The synced-query cache: one upstream per distinct query, evicted on fault (SPEC §7).

Why not ``share()`` or ``replay()``: reactivex's shared subjects keep a terminal error and hand it
to every later subscriber, so one transient fault would answer every future caller of that query
with the same stale error. This cache evicts a faulted chain instead, and the next caller opens a
fresh one. Nothing re-subscribes by itself: the retry decision belongs to the caller (a standing
watch re-opens through :func:`~rxmesh.operators.reopen_on_transient_fault`).

Implementation: each entry is a small hand-written multicast ("chain") built on public reactivex
API only (``Observable`` and disposables): a dictionary of subscribed observers, the latest frame,
a manual reference count, and an idle timer on the scheduler. A chain is never re-connected:
once released, evicted or terminated it is dead, and the next ``get`` builds a new one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SerialDisposable

from rxmesh._scheduling import resolve_scheduler
from rxmesh.faults import is_store_unreachable
from rxmesh.model import FrameKind, QueryFrame

__all__ = [
    "DEFAULT_IDLE_GRACE",
    "CacheStatistics",
    "SyncedQueryCache",
    "fold_query_frames",
]

Q = TypeVar("Q", bound=Hashable)
T = TypeVar("T")

DEFAULT_IDLE_GRACE = 30.0
"""Seconds a chain with no subscriber is kept before it is released and its entry removed."""


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    """A snapshot of a :class:`SyncedQueryCache`.

    Attributes:
        entries: distinct queries with a live chain in the cache now.
        subscribers: subscriptions currently attached to any chain (evicted ones included).
        upstream_subscriptions: upstreams opened since the cache was built.
        evictions: chains evicted because they failed, completed, or carried a silent provider.
        releases: chains released after their idle grace (or at once when evicted and idle).
    """

    entries: int
    subscribers: int
    upstream_subscriptions: int
    evictions: int
    releases: int


def fold_query_frames(state: QueryFrame, frame: QueryFrame) -> QueryFrame:
    """Fold a frame into the replayed state, so a late subscriber gets a snapshot, not a delta.

    An Initial replaces the state; a Delta is applied to it (removals, then upserts) and the
    result is an Initial ordered by path that keeps the state's ``silent_providers``. Pass it as
    ``SyncedQueryCache(open_query, replay=fold_query_frames)``.
    """
    if frame.kind is FrameKind.INITIAL or state.kind is not FrameKind.INITIAL:
        return frame
    nodes = {node.path: node for node in state.nodes}
    for path in frame.removed:
        nodes.pop(path, None)
    for node in frame.nodes:
        nodes[node.path] = node
    return state.model_copy(update={"nodes": tuple(nodes[path] for path in sorted(nodes))})


class _Chain(Generic[T]):
    """One upstream subscription multicast to many observers; never re-connected."""

    __slots__ = (
        "evicted",
        "has_value",
        "idle_timer",
        "key",
        "latest",
        "observers",
        "snapshot",
        "terminated",
        "upstream",
    )

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.observers: dict[int, abc.ObserverBase[T]] = {}
        self.snapshot: tuple[abc.ObserverBase[T], ...] | None = ()
        self.latest: Any = None
        self.has_value = False
        self.evicted = False
        self.terminated = False
        self.upstream = SerialDisposable()
        self.idle_timer = SerialDisposable()

    def targets(self) -> tuple[abc.ObserverBase[T], ...]:
        snapshot = self.snapshot
        if snapshot is None:
            snapshot = self.snapshot = tuple(self.observers.values())
        return snapshot


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

    Args:
        open_query: builds the (cold) upstream of one query, e.g. a :func:`fan_in` of providers.
        idle_grace: seconds to keep an idle chain (>= 0; 0 releases at once).
        scheduler: where the idle timers run; else the subscription's scheduler, else the running
            asyncio loop.
        replay: how the replayed value follows the frames, ``replay(state, frame) -> state``;
            ``None`` replays the latest frame. :func:`fold_query_frames` replays a snapshot.

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
        self._open_query = open_query
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

    def get(self, query: Q) -> Observable[T]:
        """The live, shared stream of ``query`` (lazy: nothing opens until a subscription)."""
        hash(query)  # refuse an unhashable query here, not at subscribe time

        def subscribe(
            observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            return self._join(query, observer, scheduler)

        return Observable(subscribe)

    def statistics(self) -> CacheStatistics:
        """A frozen snapshot of the cache's counters."""
        with self._lock:
            return CacheStatistics(
                entries=len(self._entries),
                subscribers=self._subscribers,
                upstream_subscriptions=self._upstreams,
                evictions=self._evictions,
                releases=self._releases,
            )

    # -- internals -------------------------------------------------------------------------

    def _join(
        self,
        query: Q,
        observer: abc.ObserverBase[T],
        scheduler: abc.SchedulerBase | None,
    ) -> abc.DisposableBase:
        with self._lock:
            chain = self._entries.get(query)
            fresh = chain is None
            if chain is None:
                chain = _Chain(query)
                self._entries[query] = chain
            chain.idle_timer.disposable = None  # a subscription within the grace reuses it
            if chain.has_value:
                observer.on_next(chain.latest)
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

    def _connect(self, chain: _Chain[T], query: Q, scheduler: abc.SchedulerBase | None) -> None:
        replay = self._replay

        def on_next(value: T) -> None:
            with self._lock:
                if chain.terminated:
                    return
                if replay is not None and chain.has_value:
                    chain.latest = replay(chain.latest, value)
                else:
                    chain.latest = value
                chain.has_value = True
                silent = getattr(value, "silent_providers", None)
                if silent:
                    logger.bind(query=repr(chain.key), silent_providers=list(silent)).warning(
                        "query {!r}: provider(s) {} gave no real answer; the frame is delivered "
                        "but not cached",
                        chain.key,
                        ", ".join(map(str, silent)),
                    )
                    self._evict(chain)
                for target in chain.targets():
                    target.on_next(value)

        def on_error(error: Exception) -> None:
            with self._lock:
                if chain.terminated:
                    return
                targets = self._terminate(chain)
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
            subscription = opened.subscribe(on_next, on_error, on_completed, scheduler=scheduler)
        except Exception as exc:  # noqa: BLE001 - delivered as the chain's error, never swallowed
            on_error(exc)
            return
        if chain.terminated:
            subscription.dispose()
        else:
            chain.upstream.disposable = subscription

    def _terminate(self, chain: _Chain[T]) -> tuple[abc.ObserverBase[T], ...]:
        """Mark ``chain`` dead, evict it, detach and return its observers (lock held)."""
        chain.terminated = True
        self._evict(chain)
        targets = chain.targets()
        self._subscribers -= len(chain.observers)
        chain.observers.clear()
        chain.snapshot = ()
        chain.idle_timer.dispose()
        chain.upstream.dispose()
        return targets

    def _evict(self, chain: _Chain[T]) -> None:
        """Remove ``chain``'s entry, only if the key still maps to that very chain (lock held)."""
        if chain.evicted:
            return
        chain.evicted = True
        if self._entries.get(chain.key) is chain:
            del self._entries[chain.key]
            self._evictions += 1

    def _idle(self, chain: _Chain[T], scheduler: abc.SchedulerBase | None) -> None:
        """The last subscriber left ``chain`` (lock held): release now or after the grace."""
        if chain.evicted or self._idle_grace == 0:
            self._release(chain)
            return

        def release(_: abc.SchedulerBase, __: Any = None) -> None:
            with self._lock:
                if not chain.observers and not chain.terminated:
                    self._release(chain)

        when = resolve_scheduler(self._scheduler, scheduler)
        chain.idle_timer.disposable = when.schedule_relative(self._idle_grace, release)

    def _release(self, chain: _Chain[T]) -> None:
        chain.terminated = True
        if self._entries.get(chain.key) is chain:
            del self._entries[chain.key]
        chain.evicted = True
        chain.idle_timer.dispose()
        chain.upstream.dispose()
        self._releases += 1
