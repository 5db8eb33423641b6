"""The live record census: a standing watch over the NodeType records.

The census subscribes ``cache.get(NodeQuery(node_type="NodeType"))`` through
:func:`~rxmesh.operators.reopen_on_transient_fault`, so a transient fault (a ``StoreError``
from ``ConnectionResetError(104)`` mid-stream, say) re-opens it through the cache, which
has already evicted the faulted chain: every re-open reads a fresh upstream, resumed from the
last reading's ``resume_token`` (``cache.get(query, resume_from=token)``), so it reads a Delta of
what changed meanwhile, or an Initial marked ``reset`` when that cannot be told. Each reading
(Initial or Delta) re-bakes what changed (:meth:`NodeTypeRegistry.apply`) and is recorded on the
health check; before each re-open the interruption is recorded there, so ``/health`` degrades
and says why; the next reading clears it; a terminal fault stays.

Health wording (tests pin it):

- interruption: ``"<OuterType> interrupted the census subscription — re-opening (n/5) in 15s:
  <the chain, outer to inner>"`` — ``OuterType`` is the outermost type of the fault
  (``StoreError`` for a connection reset; the same name the re-open operator logs), and the chain
  after the colon names the cause (``ConnectionResetError: [Errno 104] Connection reset by peer``);
- terminal: ``"census ended: <OuterType>: <message> (...)"``; the health check adds that the last
  reading is frozen;
- a store-unreachable fault (:func:`rxmesh.faults.is_store_unreachable`) carries the stall
  adjacency sentence of :func:`rxmesh.diagnosis.stall_adjacency` when this process stalled.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import SerialDisposable

from rxmesh.faults import exception_chain, is_standing_watch_transient, is_store_unreachable
from rxmesh.health import LiveRecordReading
from rxmesh.model import NODE_TYPE_NODE_TYPE, FrameKind, MeshNode, NodeQuery, QueryFrame
from rxmesh.nodetypes import NodeTypeRegistry
from rxmesh.operators import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    reopen_on_transient_fault,
)

__all__ = ["LiveRecordCensus"]

CENSUS_QUERY = NodeQuery(node_type=NODE_TYPE_NODE_TYPE)
"""The query the census watches: every NodeType record."""

_CHAIN_FRAMES_SHOWN = 4


class QuerySource(Protocol):
    """Where the census reads: anything with ``get(query, resume_from) -> Observable[QueryFrame]``
    (the :class:`~rxmesh.cache.SyncedQueryCache`)."""

    def get(
        self, query: NodeQuery, resume_from: str | None = None, /
    ) -> Observable[QueryFrame]:
        """The live stream of ``query`` (resumed from ``resume_from`` when given)."""
        ...


class CensusHealth(Protocol):
    """Where the census reports (the :class:`~rxmesh.health.LiveRecordCensusCheck`)."""

    def record_live_records(self, reading: int | LiveRecordReading) -> None:
        """A reading was taken; clears any fault."""
        ...

    def record_live_records_fault(self, text: str, extra: str | None = None) -> None:
        """The census was interrupted or ended; health degrades."""
        ...


@dataclass(frozen=True, slots=True)
class CensusStatistics:
    """A snapshot of a :class:`LiveRecordCensus`.

    Attributes:
        running: started and not ended nor disposed.
        ended: the census ended (a terminal fault, completion, or a failed reading).
        opens: how many times the factory (``cache.get``) was called.
        readings: frames read (Initial and Delta).
        records: NodeType records in the latest reading.
        reopens: re-opens scheduled after a transient fault.
        last_fault: the text last recorded on health, or ``None`` after a clean reading.
        reopen: whether this census re-opens (False for the raw negative control).
    """

    running: bool
    ended: bool
    opens: int
    readings: int
    records: int
    reopens: int
    last_fault: str | None
    reopen: bool


def describe_chain(fault: BaseException) -> str:
    """``"StoreError: lost ← ConnectionResetError: [Errno 104] Connection reset by peer"``."""
    frames = list(exception_chain(fault))
    shown = [f"{type(frame).__name__}: {frame}" for frame in frames[:_CHAIN_FRAMES_SHOWN]]
    if len(frames) > _CHAIN_FRAMES_SHOWN:
        shown.append(f"... {len(frames) - _CHAIN_FRAMES_SHOWN} more")
    return " ← ".join(shown)


def _adjacency(fault: BaseException) -> str | None:
    """The stall-adjacency sentence for a store-unreachable fault, when this process stalled."""
    if not is_store_unreachable(fault):
        return None
    from rxmesh.diagnosis import stall_adjacency

    adjacency = stall_adjacency()
    return None if adjacency is None else adjacency.describe()


class LiveRecordCensus:
    """The standing watch over NodeType records that keeps the registry and health current.

    Args:
        cache: where the query is read; asked again (``cache.get``) for every re-open.
        registry: the baked node types; each reading re-bakes what changed.
        health_check: records readings and faults (``LiveRecordCensusCheck``).
        query: the NodeType query.
        backoff: seconds before the n-th consecutive re-open (2, 5, 15, 30, 60).
        max_consecutive: re-opens in a row without a reading (5).
        scheduler: where the backoff timers run (and the subscription's scheduler).
        reopen: ``False`` builds the raw census (same pipeline, no re-open): the negative control
            that shows a census without the rule ends on the first fault.

    Example:
        >>> census = LiveRecordCensus(cache, registry, check).start()  # doctest: +SKIP
    """

    def __init__(
        self,
        cache: QuerySource,
        registry: NodeTypeRegistry,
        health_check: CensusHealth,
        *,
        query: NodeQuery = CENSUS_QUERY,
        backoff: Sequence[float] = DEFAULT_REOPEN_BACKOFF,
        max_consecutive: int = DEFAULT_MAX_CONSECUTIVE_REOPENS,
        scheduler: abc.SchedulerBase | None = None,
        reopen: bool = True,
    ) -> None:
        self._cache = cache
        self._registry = registry
        self._health = health_check
        self._query = query
        self._backoff = tuple(backoff)
        self._max = max_consecutive
        self._scheduler = scheduler
        self._reopen = reopen
        self._lock = threading.RLock()
        self._subscription = SerialDisposable()
        self._view: dict[str, MeshNode] = {}
        self._token: str | None = None  # where the last reading stands: re-opens resume there
        self._started = False
        self._ended = False
        self._disposed = False
        self._opens = 0
        self._readings = 0
        self._reopens = 0
        self._last_fault: str | None = None
        # Built now, so bad arguments are refused here rather than at start().
        self._stream = self._build()

    # -- the pipeline -------------------------------------------------------------------------

    def _open(self) -> Observable[QueryFrame]:
        with self._lock:
            self._opens += 1
            token = self._token
        if token is None:
            return self._cache.get(self._query)
        return self._cache.get(self._query, token)

    def _build(self) -> Observable[QueryFrame]:
        if not self._reopen:
            # The raw census: one opening, nothing re-opens it (the negative control).
            def subscribe(
                observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
            ) -> abc.DisposableBase:
                return self._open().subscribe(observer, scheduler=scheduler)

            return Observable(subscribe)
        return reopen_on_transient_fault(
            self._open,
            backoff=self._backoff,
            max_consecutive=self._max,
            on_reopen=self._on_reopen,
            scheduler=self._scheduler,
        )

    def start(self) -> LiveRecordCensus:
        """Subscribe the census (once); returns ``self``.

        Raises:
            RuntimeError: it was already started or disposed.
        """
        with self._lock:
            if self._started or self._disposed:
                raise RuntimeError("the live record census can be started once")
            self._started = True
        logger.bind(query=repr(self._query), reopen=self._reopen).info("live record census started")
        subscription = self._stream.subscribe(
            self._on_reading, self._on_ended, self._on_completed, scheduler=self._scheduler
        )
        with self._lock:
            if self._ended or self._disposed:
                subscription.dispose()
            else:
                self._subscription.disposable = subscription
        return self

    def dispose(self) -> None:
        """Stop watching (cancels a pending re-open). Health keeps its last entry."""
        with self._lock:
            self._disposed = True
        self._subscription.dispose()

    # -- readings and faults ------------------------------------------------------------------

    def _on_reading(self, frame: QueryFrame) -> None:
        with self._lock:
            if self._ended or self._disposed:
                return
        try:
            change = self._registry.apply(frame)
        except Exception as defect:  # noqa: BLE001 - reported on health and ends the census
            self._end(
                f"census ended: the registry failed to apply a reading: "
                f"{type(defect).__name__}: {defect}",
                defect,
                None,
            )
            self._subscription.dispose()
            return
        with self._lock:
            if frame.kind is FrameKind.INITIAL:
                self._view = {node.path: node for node in frame.nodes}
            else:
                for path in frame.removed:
                    self._view.pop(path, None)
                for node in frame.nodes:
                    self._view[node.path] = node
            self._token = frame.resume_token
            self._readings += 1
            self._last_fault = None
            records = len(self._view)
        baked = len(self._registry.names())
        self._health.record_live_records(
            LiveRecordReading(records=records, at=datetime.now(UTC), baked=baked)
        )
        if change.changed:
            logger.bind(
                records=records, baked=list(change.baked), dropped=list(change.dropped)
            ).info(
                "live record census: {} NodeType record(s) watched; baked {}, dropped {}",
                records,
                list(change.baked),
                list(change.dropped),
            )

    def _on_reopen(self, fault: BaseException, attempt: int, delay: float) -> None:
        text = (
            f"{type(fault).__name__} interrupted the census subscription — re-opening "
            f"({attempt}/{self._max}) in {delay:g}s: {describe_chain(fault)}"
        )
        extra = _adjacency(fault)
        with self._lock:
            self._reopens += 1
            self._last_fault = text if extra is None else f"{text}; {extra}"
        self._health.record_live_records_fault(text, extra)

    def _on_ended(self, fault: Exception) -> None:
        if self._reopen and is_standing_watch_transient(fault):
            why = f"the re-open budget of {self._max} in a row without a reading is spent"
        elif self._reopen:
            why = "not a transient fault, not re-opened"
        else:
            why = "the raw census does not re-open"
        text = f"census ended: {describe_chain(fault)} ({why})"
        self._end(text, fault, _adjacency(fault))

    def _on_completed(self) -> None:
        self._end(
            "census ended: the NodeType query completed; nothing is watched any more", None, None
        )

    def _end(self, text: str, fault: BaseException | None, extra: str | None) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
            self._last_fault = text if extra is None else f"{text}; {extra}"
        log = logger.bind(
            query=repr(self._query), error_type=None if fault is None else type(fault).__name__
        )
        if fault is not None:
            log = log.opt(exception=fault)
        log.error("live record census: {}", self._last_fault)
        self._health.record_live_records_fault(text, extra)

    # -- introspection ------------------------------------------------------------------------

    @property
    def records(self) -> tuple[MeshNode, ...]:
        """The NodeType records of the latest reading, ordered by path."""
        with self._lock:
            return tuple(self._view[path] for path in sorted(self._view))

    def statistics(self) -> CensusStatistics:
        """A frozen snapshot of the census's counters."""
        with self._lock:
            return CensusStatistics(
                running=self._started and not self._ended and not self._disposed,
                ended=self._ended,
                opens=self._opens,
                readings=self._readings,
                records=len(self._view),
                reopens=self._reopens,
                last_fault=self._last_fault,
                reopen=self._reopen,
            )
