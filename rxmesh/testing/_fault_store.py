"""``FaultInjectingStore``: wrap any store and make it fail the way real stores fail.

Every knob acts when a verb is called or a stream subscribed, so a retry or a re-open meets the
knob again; a knob with ``times=`` counts down once per call or subscription it affects.
Every operation met is logged in :attr:`FaultInjectingStore.operations` with its outcome (a
refused write is logged too: "no write was attempted at X" is asserted on this log), counted per
operation in :attr:`FaultInjectingStore.counts`, and every fault injected is counted per knob in
:attr:`FaultInjectingStore.injected`.

Private siblings: the error chains (``_fault_errors``), the log and statistics (``_fault_log``),
the feed gate (``_feed_gate``), the live query (``_fault_query``); names public in rxmesh.testing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TypeVar

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.model import (
    ChangeFeedGap,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
    WindowCommitted,
)
from rxmesh.providers._store import DEFAULT_WRITE_WINDOW, Store, feed_is_whole
from rxmesh.testing._fault_errors import (
    ExcFactory,
    connect_timeout_error,
    connection_reset_error,
    unreachable_error,
)
from rxmesh.testing._fault_log import WRITE_OPS, FaultInjectingStoreStatistics, Operation, Target
from rxmesh.testing._fault_query import Death, live_query
from rxmesh.testing._feed_gate import FeedGate, FeedMode, through_gate

__all__ = [
    "WRITE_OPS",
    "ExcFactory",
    "FaultInjectingStore",
    "FaultInjectingStoreStatistics",
    "FeedMode",
    "Operation",
    "connect_timeout_error",
    "connection_reset_error",
    "unreachable_error",
]

_T = TypeVar("_T")


class FaultInjectingStore:
    """Wraps any :class:`~rxmesh.providers.Store` and injects real stores' faults on demand
    (unreachable reads and writes, a stalled Initial, a query ending mid-stream, a lost feed).

    With no knob set it is transparent: every operation is forwarded to ``inner`` (and logged).

    Args:
        inner: the store to wrap (in-memory, Postgres, another wrapper).
        name: the printable name; ``inner.name`` by default, so answers name the real store.

    Example:
        >>> from rxmesh.providers import InMemoryStore
        >>> store = FaultInjectingStore(InMemoryStore())
        >>> store.refuse_writes_as_unreachable()
        >>> import asyncio
        >>> try:
        ...     asyncio.run(store.write(MeshNode(path="p/a")))
        ... except Exception as error:
        ...     print(type(error).__name__, store.operations[-1].outcome)
        StoreError refused
        >>> store.restore()
    """

    def __init__(self, inner: Store, *, name: str | None = None) -> None:
        self.inner = inner
        self._name = name if name is not None else inner.name
        self.operations: list[Operation] = []
        self.counts: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self._refuse_writes: ExcFactory | None = None
        self._refuse_reads: ExcFactory | None = None
        self._read_faults: dict[str, tuple[ExcFactory, int]] = {}
        self._death: Death | None = None
        self._stall: bool = False
        self._stalled: list[Callable[[], None]] = []
        self._open_queries: set[Callable[[Exception], None]] = set()
        self._gate = FeedGate(self.injected)
        self._gaps: Subject[ChangeFeedGap] = Subject()

    # -- introspection ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The printable name (the inner store's unless given)."""
        return self._name

    def __repr__(self) -> str:
        return f"FaultInjectingStore({self.inner!r})"

    def statistics(self) -> FaultInjectingStoreStatistics:
        """Counters of operations met and faults injected, as a frozen snapshot."""
        return FaultInjectingStoreStatistics(
            operations=len(self.operations),
            counts=MappingProxyType(dict(self.counts)),
            injected=MappingProxyType(dict(self.injected)),
            feed_mode=self._gate.mode,
            held_events=sum(len(sink.held) for sink in self._gate.sinks),
            stalled_queries=len(self._stalled),
        )

    def writes_attempted(self, path: str | None = None) -> list[Operation]:
        """Write-type operations met (refused ones included), optionally only those at ``path``."""
        return [
            op
            for op in self.operations
            if op.op in WRITE_OPS and (path is None or path in op.paths)
        ]

    def clear_log(self) -> None:
        """Forget the operations met and the counters (knobs stay as they are)."""
        self.operations.clear()
        self.counts.clear()
        self.injected.clear()

    # -- knobs --------------------------------------------------------------------------------

    def refuse_writes_as_unreachable(self, exc_factory: ExcFactory | None = None) -> None:
        """Refuse every write-type operation as unreachable until :meth:`restore`.

        The default error is :func:`unreachable_error` (``StoreError(08001)`` from
        ``ConnectionRefusedError``); nothing reaches the inner store.
        """
        self._refuse_writes = exc_factory or (lambda: unreachable_error(self._name))

    def refuse_reads_as_unreachable(self, exc_factory: ExcFactory | None = None) -> None:
        """Refuse every read, read_many, page and query as unreachable until :meth:`restore`."""
        self._refuse_reads = exc_factory or (lambda: unreachable_error(self._name))

    def restore(self) -> None:
        """The store answers again: stop refusing writes and reads.

        Other knobs (armed read faults, deaths, a stall, a held feed) are left as they are; this
        announces nothing (call :meth:`declare_gap` for the evidence a real store would give).
        """
        self._refuse_writes = None
        self._refuse_reads = None

    def fault_next_read(
        self, path: str, exc_factory: ExcFactory | None = None, *, times: int = 1
    ) -> None:
        """Fail the next ``times`` reads of ``path`` (``read``, or a ``read_many`` that includes
        it) with ``exc_factory()``; other paths pass through.

        The default error is :func:`connect_timeout_error`. Arming a path again replaces it.
        """
        if times < 1:
            raise ValueError(f"times must be at least 1, got {times!r}")
        self._read_faults[path] = (
            exc_factory or (lambda: connect_timeout_error(self._name)),
            times,
        )

    def die_mid_stream(
        self,
        after_frames: int = 1,
        exc_factory: ExcFactory | None = None,
        *,
        times: int = 1,
        query: NodeQuery | None = None,
    ) -> None:
        """Make the next ``times`` query subscriptions (of ``query``, or any) die right after
        delivering ``after_frames`` frames (0: before the Initial).

        The default error is a connection reset, :func:`connection_reset_error`.
        """
        if after_frames < 0 or times < 1:
            raise ValueError(f"need after_frames >= 0 and times >= 1, got {after_frames}, {times}")
        factory = exc_factory or (lambda: connection_reset_error(self._name))
        self._death = Death(after_frames, factory, times, query)

    def stall_initial(self) -> None:
        """Queries subscribed from now on emit nothing (no Initial) until
        :meth:`release_initial`."""
        self._stall = True

    def release_initial(self) -> int:
        """Stop stalling and start every held query now; returns how many were held."""
        self._stall = False
        starts, self._stalled = self._stalled, []
        for start in starts:
            start()
        return len(starts)

    def sever_open_queries(self, exc_factory: ExcFactory | None = None) -> int:
        """End every query subscription open now with a mid-stream fault; returns how many.

        This is what a store does to a live query whose streaming connection is reset: the
        default error is a connection reset, :func:`connection_reset_error`. Queries subscribed
        later are not affected (see :meth:`die_mid_stream` for those).
        """
        factory = exc_factory or (lambda: connection_reset_error(self._name))
        open_now = list(self._open_queries)
        for sever in open_now:
            sever(factory())
        return len(open_now)

    def hold_change_feed(self) -> None:
        """Buffer the change feed (``changes``, announced commits, query deltas) until
        :meth:`resume_change_feed`."""
        self._gate.mode = "hold"

    def drop_change_feed(self) -> None:
        """Lose the change feed (``changes``, announced commits, query deltas) until
        :meth:`resume_change_feed`."""
        self._gate.mode = "drop"

    def resume_change_feed(
        self, *, announce_gap: bool = True, reason: str = "change feed resumed"
    ) -> ChangeFeedGap | None:
        """Deliver what was held (nothing, if it was dropped), then declare a gap if asked.

        Without ``announce_gap`` a dropped feed's losses stay silent: that is the drill for a
        dependent that must not rely on the feed alone.
        """
        self._gate.release()
        return self.declare_gap(reason) if announce_gap else None

    def declare_gap(
        self, reason: str = "declared", *, lost_at: datetime | None = None
    ) -> ChangeFeedGap:
        """Publish a :class:`ChangeFeedGap` on ``gaps`` and ``answers_again``; live queries
        through this store re-read and emit a Delta of what they missed (if anything)."""
        now = datetime.now(UTC)
        gap = ChangeFeedGap(
            source=self._name, lost_at=lost_at or now, resumed_at=now, reason=reason
        )
        if _instrumentation.enabled:
            _instrumentation.changefeed_gap_declared(gap)
        self.injected["gap_declared"] += 1
        self._gaps.on_next(gap)
        return gap

    # -- plumbing -----------------------------------------------------------------------------

    def _guarded(
        self,
        op: str,
        target: Target,
        decide: Callable[[], tuple[str, Exception | None]],
        source: Callable[[], Observable[_T]],
    ) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            error = self._decide(op, target, decide)
            if error is not None:
                observer.on_error(error)
                return Disposable()
            return source().subscribe(observer, scheduler=scheduler)

        return Observable(subscribe)

    def _decide(
        self, op: str, target: Target, decide: Callable[[], tuple[str, Exception | None]]
    ) -> Exception | None:
        """Decide one operation and log and count it: the fault to inject, if any."""
        outcome, error = decide()
        self.operations.append(Operation(op, target, outcome))
        self.counts[op] += 1
        return error

    def _enter(
        self, op: str, target: Target, decide: Callable[[], tuple[str, Exception | None]]
    ) -> None:
        """:meth:`_decide` for a verb: the fault injected is raised here."""
        error = self._decide(op, target, decide)
        if error is not None:
            try:
                raise error
            finally:  # its traceback holds this frame: no cycle back through ``error``
                del error

    def _write_decision(self) -> tuple[str, Exception | None]:
        if self._refuse_writes is not None:
            self.injected["refused_write"] += 1
            return "refused", self._refuse_writes()
        return "forwarded", None

    def _read_decision(self, paths: Sequence[str]) -> tuple[str, Exception | None]:
        if self._refuse_reads is not None:
            self.injected["refused_read"] += 1
            return "refused", self._refuse_reads()
        for path in paths:
            armed = self._read_faults.get(path)
            if armed is None:
                continue
            factory, remaining = armed
            if remaining <= 1:
                del self._read_faults[path]
            else:
                self._read_faults[path] = (factory, remaining - 1)
            self.injected["faulted_read"] += 1
            return "faulted", factory()
        return "forwarded", None

    # -- reads and writes ---------------------------------------------------------------------

    async def read(self, path: str) -> MeshNode | None:
        """The inner read, unless refused or faulted."""
        self._enter("read", path, lambda: self._read_decision((path,)))
        return await self.inner.read(path)

    async def read_many(self, paths: Sequence[str]) -> dict[str, MeshNode]:
        """The inner read_many, unless refused or one of ``paths`` is faulted."""
        wanted = tuple(paths)
        self._enter("read_many", wanted, lambda: self._read_decision(wanted))
        return await self.inner.read_many(wanted)

    async def page(self, query: NodeQuery, after: MeshNode | None, limit: int) -> list[MeshNode]:
        """The inner page, unless reads are refused."""
        self._enter("page", query, lambda: self._read_decision(()))
        return await self.inner.page(query, after, limit)

    async def write(self, node: MeshNode) -> MeshNode:
        """The inner write, unless writes are refused."""
        self._enter("write", node.path, self._write_decision)
        return await self.inner.write(node)

    async def update(self, node: MeshNode, *basis: Any) -> MeshNode | None:
        """The inner update, unless writes are refused (``basis``: compare-and-set arguments,
        forwarded as given)."""
        self._enter("update", node.path, self._write_decision)
        return await self.inner.update(node, *basis)

    async def delete(self, path: str, *basis: Any) -> bool:
        """The inner delete, unless writes are refused."""
        self._enter("delete", path, self._write_decision)
        return await self.inner.delete(path, *basis)

    async def move(self, source: str, target: str, *basis: Any) -> MeshNode | None:
        """The inner move, unless writes are refused."""
        self._enter("move", (source, target), self._write_decision)
        return await self.inner.move(source, target, *basis)

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = DEFAULT_WRITE_WINDOW
    ) -> Observable[WindowCommitted]:
        """The inner write_many, unless writes are refused (then no window is attempted)."""
        batch = tuple(nodes)
        return self._guarded(
            "write_many",
            tuple(node.path for node in batch),
            self._write_decision,
            lambda: self.inner.write_many(batch, window),
        )

    # -- feeds --------------------------------------------------------------------------------

    @property
    def feed_is_whole(self) -> bool:
        """While the feed is neither held nor dropped here, and the inner store's is whole."""
        return self._gate.mode == "open" and feed_is_whole(self.inner)

    @property
    def changes(self) -> Observable[NodeChange]:
        """The inner change feed, through the hold/drop gate."""
        return through_gate(self._gate, self.inner.changes, lambda _: False)

    @property
    def gaps(self) -> Observable[ChangeFeedGap]:
        """The inner store's gaps and the gaps declared here."""
        return reactivex.merge(self.inner.gaps, self._gaps)

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """The inner evidence (announced commits through the gate, gaps not) and the gaps
        declared here."""
        own: Observable[StoreEvidence] = self._gaps
        gated = through_gate(
            self._gate, self.inner.answers_again, lambda e: isinstance(e, ChangeFeedGap)
        )
        return reactivex.merge(gated, own)

    # -- live queries -------------------------------------------------------------------------

    def query(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]:
        """The inner query (resumed from ``resume_from``, if given), with stalls, mid-stream
        deaths, the feed gate on its deltas, and a re-read (diffed) after every gap declared
        here."""

        return live_query(self, query, resume_from)
