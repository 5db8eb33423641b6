"""``InMemoryStore``: the embedded default store, the ``MockTransport`` of rxmesh.

Same contract as the real store (see :mod:`rxmesh.providers._store`), with no network and no set-up:
coroutine verbs (each call one attempt), ``None``
only for a clean absence, insert-if-absent writes that recognise their own ``request_id``, bulk
writes in windows per partition, live queries (an Initial, then a Delta per matching commit), and
the hot ``changes`` / ``gaps`` / ``answers_again`` streams. Every change takes the next number of
the store's change order (its commits are serialised under its lock), so a live query can be
resumed from the token of any frame it gave (:mod:`._memory_positions`).

A verb's coroutine never suspends; a stream emits synchronously at subscription time (still lazy:
nothing happens before ``subscribe``). Mutations hold a lock; streams are fed after it is
released. Stamping (``created_by``, ``created_at``) is the mesh's job: the store keeps what it is
given, except ``version``: a write stores ``max(1, node.version)``; ``update`` and ``move`` bump
it by one and, given the request's id, keep it as the row's (the id of the row's last write).
``update``, ``delete`` and ``move`` take an expected version: a compare-and-set that changes
nothing when another write came first.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

from rxmesh._util.arguments import at_least
from rxmesh._util.trusted import fields_of, trusted
from rxmesh.exceptions import StoreConflictError
from rxmesh.instrumentation import _seam as _instrumentation
from rxmesh.model import (
    ChangeFeedGap,
    CommitAnnounced,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
    WindowCommitted,
    partition_of,
)
from rxmesh.providers._memory_live import Commit, live_query
from rxmesh.providers._memory_positions import DEFAULT_TOMBSTONE_RETENTION, ChangePositions
from rxmesh.providers._memory_verbs import MemoryVerbs, WriteAttempt
from rxmesh.providers._store import DEFAULT_WRITE_WINDOW
from rxmesh.providers._window import windowed

__all__ = ["InMemoryStore"]

_T = TypeVar("_T")
_CHANGE_FIELDS = fields_of(NodeChange)
_ANNOUNCED_FIELDS = fields_of(CommitAnnounced)


@dataclass(frozen=True, slots=True)
class InMemoryStoreStatistics:
    """A snapshot of an :class:`InMemoryStore`'s state and counters."""

    partitions: int
    nodes: int
    reads: int
    writes_attempted: int
    conflicts: int
    windows_committed: int
    changes_published: int
    gaps_declared: int
    live_queries: int
    position: int = 0
    tombstones: int = 0
    horizon: int = 0


def _hot(subject: Subject[_T]) -> Observable[_T]:
    """A read-only view of a subject: subscribers see what it publishes from now on."""

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        return subject.subscribe(observer, scheduler=scheduler)

    return Observable(subscribe)


class InMemoryStore(MemoryVerbs):
    """The embedded store: a dict per partition, a change feed, announced commits.

    Args:
        name: the printable name used in logs, frames and evidence (``"memory"``).
        tombstone_retention: deletions remembered for resumed live queries (the oldest are
            forgotten first; a token older than the newest one forgotten answers a reset).

    Attributes:
        write_log: every write-type operation attempted, as :class:`WriteAttempt` entries, in order
            (including the ones that were refused with a conflict).

    Example:
        >>> store = InMemoryStore()
        >>> node = MeshNode(path="p/a", node_type="Note", content={"text": "hi"})
        >>> import asyncio
        >>> asyncio.run(store.write(node)).version
        1
    """

    def __init__(
        self, name: str = "memory", *, tombstone_retention: int = DEFAULT_TOMBSTONE_RETENTION
    ) -> None:
        at_least("tombstone_retention", tombstone_retention, 0)
        self._name = name
        self._lock = threading.RLock()
        self._partitions: dict[str, dict[str, MeshNode]] = {}
        self._positions = ChangePositions(tombstone_retention)
        self._commits: Subject[Commit] = Subject()
        self._changes: Subject[NodeChange] = Subject()
        self._gaps: Subject[ChangeFeedGap] = Subject()
        self._answers: Subject[StoreEvidence] = Subject()
        self.write_log: list[WriteAttempt] = []
        self._reads = 0
        self._conflicts = 0
        self._windows = 0
        self._published = 0
        self._gaps_declared = 0
        self._live_queries = 0

    # -- introspection ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The printable name of this store."""
        return self._name

    def __repr__(self) -> str:
        return f"InMemoryStore(name={self._name!r})"

    def statistics(self) -> InMemoryStoreStatistics:
        """Counters and sizes, as a frozen snapshot."""
        with self._lock:
            return InMemoryStoreStatistics(
                partitions=len(self._partitions),
                nodes=sum(len(rows) for rows in self._partitions.values()),
                reads=self._reads,
                writes_attempted=len(self.write_log),
                conflicts=self._conflicts,
                windows_committed=self._windows,
                changes_published=self._published,
                gaps_declared=self._gaps_declared,
                live_queries=self._live_queries,
                position=self._positions.current,
                tombstones=self._positions.tombstones,
                horizon=self._positions.horizon,
            )

    def nodes(self, partition: str | None = None) -> list[MeshNode]:
        """Every stored node (of one partition, or all), ordered by path. Not an observable."""
        with self._lock:
            rows = [
                node
                for name, table in self._partitions.items()
                if partition is None or name == partition
                for node in table.values()
            ]
        return sorted(rows, key=lambda n: n.path)

    # -- hot streams --------------------------------------------------------------------------

    @property
    def feed_is_whole(self) -> bool:
        """Always: every committed change is published on ``changes`` as it commits."""
        return True

    @property
    def changes(self) -> Observable[NodeChange]:
        """Hot stream of committed changes (one :class:`NodeChange` per row changed)."""
        return _hot(self._changes)

    @property
    def gaps(self) -> Observable[ChangeFeedGap]:
        """Hot stream of declared change-feed gaps (only :meth:`declare_gap` declares one)."""
        return _hot(self._gaps)

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """Hot stream of evidence: a :class:`CommitAnnounced` per committed row change, and every
        declared :class:`ChangeFeedGap`."""
        return _hot(self._answers)

    def declare_gap(
        self, reason: str = "declared", *, lost_at: datetime | None = None
    ) -> ChangeFeedGap:
        """Publish a :class:`ChangeFeedGap` on ``gaps`` and ``answers_again`` and return it.

        The in-memory feed never loses anything, so live queries have nothing to re-read; this
        exists so tests and drills can hand dependents the evidence a real store would.
        """
        now = datetime.now(UTC)
        gap = ChangeFeedGap(
            source=self._name, lost_at=lost_at or now, resumed_at=now, reason=reason
        )
        if _instrumentation.enabled:
            _instrumentation.changefeed_gap_declared(gap)
        with self._lock:
            self._gaps_declared += 1
        self._gaps.on_next(gap)
        self._answers.on_next(gap)
        return gap

    # -- reads --------------------------------------------------------------------------------

    def _get(self, path: str) -> MeshNode | None:
        table = self._partitions.get(partition_of(path))
        return None if table is None else table.get(path)

    # Each verb is one synchronous step under the lock: a coroutine that never suspends.

    async def read(self, path: str) -> MeshNode | None:
        """The node at ``path``; ``None`` if absent (including a partition never written)."""
        with self._lock:
            self._reads += 1
            return self._get(path)

    async def read_many(self, paths: Sequence[str]) -> dict[str, MeshNode]:
        """The nodes present among ``paths``; absent paths are missing from the dict."""
        with self._lock:
            self._reads += 1
            found = {path: self._get(path) for path in paths}
        return {path: node for path, node in found.items() if node is not None}

    # -- writes -------------------------------------------------------------------------------

    def _publish(self, changes: Sequence[NodeChange], last: int) -> None:
        """Publish one commit, after the lock; ``last``: its last change's number, read under
        the lock that made it (another commit may have been made since)."""
        if not changes:
            return
        batch = tuple(changes)
        with self._lock:
            self._published += len(batch)
        self._commits.on_next((last, batch))
        for change in batch:
            self._changes.on_next(change)
        # Built without re-validation: every field comes from a row this store just validated.
        for change in batch:
            self._answers.on_next(
                trusted(
                    CommitAnnounced,
                    {"source": self._name, "path": change.path, "version": change.version},
                    _ANNOUNCED_FIELDS,
                )
            )

    def _upsert(self, node: MeshNode) -> NodeChange:
        self._partitions.setdefault(node.partition, {})[node.path] = node
        self._positions.changed(node.path)
        return trusted(
            NodeChange,
            {
                "source": self._name,
                "op": "upsert",
                "path": node.path,
                "version": node.version,
                "node": node,
            },
            _CHANGE_FIELDS,
        )

    def _conflict(self, path: str, existing: MeshNode, what: str) -> StoreConflictError:
        self._conflicts += 1
        return StoreConflictError(
            f"{what}: a row is already at '{path}' (request {existing.request_id!r}) "
            f"in store '{self._name}'",
            path=path,
            existing_request_id=existing.request_id,
            store=self._name,
        )

    async def write(self, node: MeshNode) -> MeshNode:
        """Insert ``node`` if its path is free; the same ``request_id`` finds its own row.

        Returns the stored row (``version = max(1, node.version)``). A row written by another
        request (or with no request id) raises :class:`StoreConflictError`.
        """
        with self._lock:
            self.write_log.append(WriteAttempt("write", node.path))
            existing = self._get(node.path)
            if existing is not None:
                if node.request_id is not None and existing.request_id == node.request_id:
                    return existing  # an ambiguous commit that did land: not a new commit
                raise self._conflict(node.path, existing, "write refused")
            # A node the mesh stamped has its version (>= 1) already: kept as is (frozen).
            stored = node if node.version >= 1 else node.model_copy(update={"version": 1})
            change = self._upsert(stored)
            last = self._positions.current
        self._publish([change], last)
        return stored

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = DEFAULT_WRITE_WINDOW
    ) -> Observable[WindowCommitted]:
        """Insert ``nodes`` in windows of at most ``window`` rows, one partition per window.

        Partitions are written in the order they first appear; ``WindowCommitted.index`` counts
        the windows of its partition from 0. Rows whose path is taken (also by an earlier row of
        the same call) are skipped and not listed. A window whose rows were all skipped still
        commits (with no paths).

        Raises:
            ValueError: ``window`` is smaller than 1 (at call time: a programming error).
        """
        if window < 1:
            raise ValueError(f"window must be at least 1 row, got {window!r}")
        batch = tuple(nodes)

        def subscribe(
            observer: abc.ObserverBase[WindowCommitted],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            by_partition: dict[str, list[MeshNode]] = {}
            for node in batch:
                by_partition.setdefault(node.partition, []).append(node)
            for partition, rows in by_partition.items():
                for index, start in enumerate(range(0, len(rows), window)):
                    committed = self._commit_window(rows[start : start + window])
                    observer.on_next(
                        WindowCommitted(
                            partition=partition,
                            index=index,
                            paths=tuple(c.path for c in committed),
                        )
                    )
            observer.on_completed()
            return Disposable()

        return Observable(subscribe)

    def _commit_window(self, rows: Sequence[MeshNode]) -> list[NodeChange]:
        with self._lock:
            changes: list[NodeChange] = []
            for node in rows:
                self.write_log.append(WriteAttempt("write_many", node.path))
                if self._get(node.path) is not None:
                    continue
                stored = node if node.version >= 1 else node.model_copy(update={"version": 1})
                changes.append(self._upsert(stored))
            self._windows += 1
            last = self._positions.current
        self._publish(changes, last)
        return changes

    # -- live queries -------------------------------------------------------------------------

    def _matching(self, query: NodeQuery) -> list[MeshNode]:
        """Every node ``query`` matches (a read: counted), with the lock held."""
        self._reads += 1
        return [
            node
            for name, table in self._partitions.items()
            if query.partition is None or name == query.partition
            for node in table.values()
            if query.matches(node)
        ]

    def _snapshot(self, query: NodeQuery) -> tuple[int, list[MeshNode]]:
        with self._lock:
            return self._positions.current, self._matching(query)

    def _resume(
        self, query: NodeQuery, token: str
    ) -> tuple[int, list[MeshNode], list[str], list[MeshNode]] | None:
        with self._lock:
            since = self._positions.position(token)
            if since is None:
                return None
            changed, removed = self._positions.since(query, since, self._get)
            at, rows = self._snapshot(query)
            return at, changed, removed, rows

    def _live_query_opened(self, delta: int) -> None:
        with self._lock:
            self._live_queries += delta

    async def page(self, query: NodeQuery, after: MeshNode | None, limit: int) -> list[MeshNode]:
        """The first ``limit`` nodes matching ``query`` (its content filter included) strictly
        after ``after`` in the query's window order (``order_by``, then the path).

        Raises:
            ValueError: ``limit`` is below 1 (a programming error).
        """
        if limit < 1:
            raise ValueError(f"a page holds at least 1 node, not {limit!r}")
        bound = None if after is None else query.sort_key(after)
        key = query.sort_key
        with self._lock:
            rows = self._matching(query)
        if bound is not None:
            rows = [node for node in rows if key(node) > bound]
        return heapq.nsmallest(limit, rows, key=key)

    def query(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]:
        """An Initial frame (every match, ordered by path), then one Delta per commit that
        changes the result (rows now matching in ``nodes``, rows no longer matching in
        ``removed``; a match includes the query's content filter, ``where``). A move inside the
        result is one Delta. Never completes by itself.

        Every frame carries the ``resume_token`` of the store's change order after it. With
        ``resume_from`` (a token of a frame of this store) the first frame is a Delta marked
        ``resumed``: the matching nodes changed since, and the paths removed since (deleted,
        moved away, or no longer matching); a token this store cannot resume from (another
        store's, malformed, older than the tombstones it keeps, or ahead of it) gets an Initial
        marked ``reset`` instead, never an error. A query with ``order_by`` or ``limit`` is an
        ordered window (docs/live-queries.md, "Ordered windows"): its frames come on the
        running asyncio loop, its Initial in the window's order."""
        if query.limit is not None or query.order_by:
            return windowed(self, query, reset=resume_from is not None)
        return live_query(
            query,
            resume_from=resume_from,
            commits=self._commits,
            snapshot=self._snapshot,
            resume=self._resume,
            token=self._positions.token,
            opened=self._live_query_opened,
            provider=self._name,
        )
