"""Ordered windows: the live view of the first ``limit`` matches of a query in its order, kept
by any store from its ``page`` verb, its ``changes`` and its ``gaps``.

Private to :mod:`rxmesh.providers`: each store's ``query`` hands a window (a query with
``order_by`` or ``limit``) to :func:`windowed`. docs/live-queries.md ("Ordered windows") states
what a subscriber sees.

The members are kept in a sorted list of their keys (:meth:`~rxmesh.model.NodeQuery.sort_key`):
a change costs O(log n) to place, and the boundary (the last member) is at hand. The window
knows whether it holds every match (a page came back shorter than asked): then a match always
enters; else only one that sorts before the boundary does. A member that leaves (deleted, no
longer matching, moved past the boundary) is replaced by ONE ``page`` read after the last
member, for as many nodes as are missing, once the batch of changes is applied.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable
from sortedcontainers import SortedList

from rxmesh.aio import from_async
from rxmesh.model import FrameKind, MeshNode, NodeChange, NodeQuery, QueryFrame
from rxmesh.providers._store import Store

__all__ = ["Window", "windowed"]

_GAP = object()
"""Queued when the store declares a change-feed gap."""
_END = object()
"""Queued when the store's change feed completes."""
_UNBOUNDED = sys.maxsize
"""The size of a window with ``order_by`` and no ``limit``: it holds every match."""
_PAGE = 1000
"""Nodes a page of the Initial of such a window reads at a time."""


class Window:
    """The members of one subscription's window, in order, and what a batch did to them."""

    __slots__ = ("_keys", "_members", "_touched", "limit", "query", "whole")

    def __init__(self, query: NodeQuery, limit: int) -> None:
        self.query = query
        self.limit = limit
        self._keys: SortedList[tuple[object, ...]] = SortedList()
        self._members: dict[str, tuple[tuple[object, ...], MeshNode]] = {}
        self._touched: dict[str, MeshNode | None] = {}
        self.whole = False
        """Whether every match of the query is a member (so any new match enters)."""

    def __len__(self) -> int:
        return len(self._members)

    def nodes(self) -> list[MeshNode]:
        """The members in window order."""
        members = self._members
        return [members[key[-1]][1] for key in self._keys]  # type: ignore[index]

    def last(self) -> MeshNode | None:
        """The member at the boundary (``None`` when empty)."""
        if not self._keys:
            return None
        return self._members[self._keys[-1][-1]][1]  # type: ignore[index]

    @property
    def missing(self) -> int:
        """How many members a refill should bring (0 when full or holding every match)."""
        return 0 if self.whole else self.limit - len(self._members)

    def _touch(self, path: str) -> None:
        if path not in self._touched:
            entry = self._members.get(path)
            self._touched[path] = None if entry is None else entry[1]

    def _remove(self, path: str) -> bool:
        if path not in self._members:
            return False
        self._touch(path)
        entry = self._members.pop(path)
        self._keys.remove(entry[0])
        return True

    def _add(self, node: MeshNode, key: tuple[object, ...]) -> None:
        self._touch(node.path)
        self._members[node.path] = (key, node)
        self._keys.add(key)
        if len(self._members) > self.limit:
            self._remove(self._keys[-1][-1])  # type: ignore[arg-type]
            self.whole = False  # the dropped one is a match beyond the boundary

    def apply(self, change: NodeChange) -> None:
        """One committed change: a match that sorts inside the window (or any match, while the
        window holds them all) enters; a member that stopped matching or sorts past the
        boundary leaves."""
        node = change.node
        if change.op == "upsert" and node is None:
            return  # the row was gone when the feed fetched it: its delete follows
        member = self._members.get(change.path)
        if change.op != "upsert" or node is None or not self.query.matches(node):
            self._remove(change.path)
            return
        if member is not None and (
            node.version < member[1].version
            or (node.version == member[1].version and node == member[1])
        ):
            return  # a change the member's row (read by a page) already reflects
        key = self.query.sort_key(node)
        # The boundary as it was: every non-member sorts after it, so a node before it is
        # among the first ``limit`` (also the last member itself, changed but not moved past).
        boundary = self._keys[-1] if self._keys else None
        self._remove(node.path)
        if self.whole or (boundary is not None and key <= boundary):
            self._add(node, key)

    def fill(self, nodes: Sequence[MeshNode], asked: int) -> None:
        """Append a page read after the last member (``asked``: how many it was asked for)."""
        members = self._members
        for node in nodes:
            member = members.get(node.path)
            if member is not None and member[1] == node:
                continue  # (a gap's page: only what differs is a change)
            key = self.query.sort_key(node)
            self._remove(node.path)  # (a member changed since: the page's row is newer)
            self._add(node, key)
        if len(nodes) < asked:
            self.whole = True

    def reset(self, nodes: Sequence[MeshNode]) -> None:
        """Replace every member by a fresh first page (the Initial's, or after a gap)."""
        fresh = {node.path for node in nodes}
        for path in [p for p in self._members if p not in fresh]:
            self._remove(path)
        self.whole = False
        self.fill(nodes, self.limit)

    def take(self, provider: str) -> QueryFrame | None:
        """The Delta of what changed since the last one (``None``: nothing), in window order."""
        touched, self._touched = self._touched, {}
        members = self._members
        upserts = [
            entry
            for path, before in touched.items()
            if (entry := members.get(path)) is not None and entry[1] is not before
        ]
        removed = [path for path, before in touched.items() if before is not None]
        removed = [path for path in removed if path not in members]
        if not upserts and not removed:
            return None
        upserts.sort(key=lambda entry: entry[0])
        return QueryFrame.delta([node for _, node in upserts], removed, provider=provider)

    def initial(self, provider: str, *, reset: bool = False) -> QueryFrame:
        """The Initial frame of the members, in window order (not re-sorted by path)."""
        self._touched = {}
        return QueryFrame.model_construct(
            kind=FrameKind.INITIAL, nodes=tuple(self.nodes()), provider=provider, reset=reset
        )


def windowed(
    store: Store,
    query: NodeQuery,
    *,
    reset: bool = False,
    ends: Observable[Exception] | None = None,
) -> Observable[QueryFrame]:
    """The live window of ``query`` on ``store``: an Initial of the first ``query.limit``
    matches (every match when ``limit`` is ``None``) in the query's order, then one Delta per
    batch of changes that alters it; after a declared gap, the first page read again and the
    difference as one Delta. Never completes unless the store's change feed does.

    ``reset``: the query was opened to resume; a window keeps no history to tell what changed
    since, so its Initial (the whole window) is marked ``reset``. ``ends``: errors the store
    ends its live queries with (a change feed lost past its bound); the window emits what it
    applied, then ends with the first."""
    limit = query.limit
    name = store.name

    def subscribe(
        observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        events: asyncio.Queue[object] = asyncio.Queue()
        # Listen first, then read: a change committed during the Initial is applied after it.
        subscriptions = CompositeDisposable(
            store.changes.subscribe(
                events.put_nowait,
                on_error=events.put_nowait,
                on_completed=lambda: events.put_nowait(_END),
            ),
            store.gaps.subscribe(lambda _: events.put_nowait(_GAP), on_error=events.put_nowait),
        )
        if ends is not None:
            subscriptions.add(ends.subscribe(events.put_nowait, on_error=events.put_nowait))

        async def first_page() -> list[MeshNode]:
            if limit is not None:
                return await store.page(query, None, limit)
            # No limit (order_by alone): every match, a page at a time.
            nodes: list[MeshNode] = []
            while True:
                more = await store.page(query, nodes[-1] if nodes else None, _PAGE)
                nodes.extend(more)
                if len(more) < _PAGE:
                    return nodes

        async def run() -> None:
            window = Window(query, _UNBOUNDED if limit is None else limit)
            window.reset(await first_page())
            observer.on_next(window.initial(name, reset=reset))
            ended = False
            while not ended:
                event = await events.get()
                while True:
                    if event is _END:
                        ended = True
                        break
                    if isinstance(event, Exception):
                        if frame := window.take(name):
                            observer.on_next(frame)  # what the feed did deliver
                        raise event
                    if event is _GAP:
                        window.reset(await first_page())
                    elif isinstance(event, NodeChange):
                        window.apply(event)
                    if events.empty():
                        break
                    event = events.get_nowait()
                if missing := window.missing:
                    window.fill(await store.page(query, window.last(), missing), missing)
                if frame := window.take(name):
                    observer.on_next(frame)
            observer.on_completed()

        worker = from_async(run).subscribe(on_error=observer.on_error, scheduler=scheduler)
        return CompositeDisposable(worker, subscriptions)

    return Observable(subscribe)
