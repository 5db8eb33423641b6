"""Live queries: an Initial frame, then a Delta per batch of committed changes, and after a
declared gap of the change feed one re-select per query and gap, shared by the subscriptions of
the store and streamed, whose difference is one Delta.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

import asyncpg
from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable

from rxmesh._util.path_order import PathOrdered, path_ordered
from rxmesh.aio import from_async
from rxmesh.model import FrameKind, MeshNode, NodeChange, NodeQuery, QueryFrame
from rxmesh.providers._store import Store
from rxmesh.providers._window import windowed
from rxmesh.providers.postgres._changes import Changes, ChangesSince
from rxmesh.providers.postgres._feed import ChangeFeed, Outlasted
from rxmesh.providers.postgres._pages import window_ends
from rxmesh.providers.postgres._positions import Position, parse_token
from rxmesh.providers.postgres._rows import _BUILD_CHUNK, _row_stamps, _stored_nodes_of

__all__ = ["LiveQueries"]


def _same(a: MeshNode | None, b: MeshNode) -> bool:
    """Whether two rows are equal (their fields; what ``==`` compares, minus its overhead)."""
    return a is not None and (a is b or a.__dict__ == b.__dict__)


def _initial_frame(
    nodes: list[MeshNode] | PathOrdered, provider: str, position: Position, *, reset: bool
) -> QueryFrame:
    """``QueryFrame.initial(nodes)`` at ``position``; rows that came strictly ordered by path
    (the usual case: one partition, ``ORDER BY path``) are neither re-sorted nor re-validated
    one by one, and their frame says so (:class:`PathOrdered`: the fan-in and the cache do not
    check again)."""
    ordered = path_ordered(nodes)
    return QueryFrame.model_construct(
        kind=FrameKind.INITIAL,
        nodes=QueryFrame.initial(nodes).nodes if ordered is None else ordered,
        provider=provider,
        resume_token=position.token,
        reset=reset,
    )


class _Reread:
    """One recovery after a gap, shared by the subscriptions of its query: a read of what
    changed since the oldest of their positions or, where the store cannot tell, a re-select,
    streamed: each batch is handed to every subscription that joined before the read began,
    and is gone once each of them has compared it. A 50k-row re-select never holds its 50k
    records at once, and they die young instead of reaching the collector's oldest generation,
    where each would count towards the next full pass over the whole heap. A changed row is
    built once for all of them.

    A subscription that comes after the read began cannot join (it would miss rows, or changes
    older than the position read from): it starts a recovery of its own. When the last reader
    leaves (its subscription ended), the read is cancelled: nobody is left to answer.
    """

    __slots__ = ("_built", "_positions", "_readers", "_started", "position", "task")

    def __init__(self) -> None:
        self._built: dict[str, MeshNode] = {}
        self._readers: set[_RereadReader] = set()
        self._positions: list[Position] = []
        self._started = False
        self.position: Position | None = None  # a re-select's, once its rows are compared
        self.task: asyncio.Task[None] | None = None

    @property
    def joinable(self) -> bool:
        """Whether a subscription joining now would still see every batch."""
        return not self._started

    def join(self, position: Position) -> _RereadReader:
        """A reader of this recovery for a view at ``position`` (call
        :meth:`_RereadReader.leave` at the end)."""
        if self._started:
            raise RuntimeError("a recovery cannot be joined once its read began")
        reader = _RereadReader(self)
        self._readers.add(reader)
        self._positions.append(position)
        return reader

    def since(self) -> Position:
        """The position to read changes from, which no reader's is before: the reader's own
        when there is one, else one that sees only what every reader's sees (the transactions
        below the lowest ``xmin``). The read begins: nobody joins any more."""
        self._started = True
        positions = self._positions
        if len(positions) == 1 or all(p == positions[0] for p in positions):
            return positions[0]
        lowest = min(p.xmin for p in positions)
        return Position(positions[0].identity, lowest, lowest, frozenset())

    def tell(self, changed: ChangesSince) -> None:
        """The store could tell what changed: every reader gets it, then the end."""
        for reader in self._readers:
            reader.queue.put_nowait(changed)

    async def deliver(self, partition: str, rows: list[asyncpg.Record]) -> None:
        """The read's ``each``: hand ``rows`` to every reader (nothing waits)."""
        self._started = True
        for reader in self._readers:
            reader.queue.put_nowait((partition, rows))

    def end(self, error: BaseException | None) -> None:
        """The read ended (``error``: how it failed); every reader is told after its batches."""
        self._started = True
        if not self._readers and not isinstance(error, asyncio.CancelledError | None):
            logger.bind(error_type=type(error).__name__).debug(
                "a gap's re-select failed after its last subscription left: {!r}", error
            )
        for reader in self._readers:
            reader.queue.put_nowait(error)

    def leave(self, reader: _RereadReader) -> None:
        self._readers.discard(reader)
        if not self._readers and self.task is not None and not self.task.done():
            self._started = True  # a subscription coming now reads on its own, never this one
            self.task.cancel()

    def built(self, rows: list[asyncpg.Record], partition: str) -> list[MeshNode]:
        """``rows`` as nodes (the ones another subscription built already are reused)."""
        built = self._built
        missing = [row for row in rows if row[0] not in built]
        built_now = _stored_nodes_of(missing, partition, stamps_as_text=True) if missing else ()
        for node in built_now:
            built[node.path] = node
        return [built[row[0]] for row in rows if row[0] in built]  # (a row defect is left out)


class _RereadReader:
    """One subscription's place in a shared :class:`_Reread`."""

    __slots__ = ("queue", "reread")

    def __init__(self, reread: _Reread) -> None:
        self.reread = reread
        self.queue: asyncio.Queue[
            tuple[str, list[asyncpg.Record]] | ChangesSince | BaseException | None
        ] = asyncio.Queue()

    async def next(self) -> tuple[str, list[asyncpg.Record]] | ChangesSince | None:
        """What changed (the first item, when the store could tell), else the next
        ``(partition, rows)`` batch of the re-select; ``None`` once the read has ended; the
        read's error if it failed."""
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def leave(self) -> None:
        """Stop receiving batches (what was queued for this reader is dropped)."""
        self.reread.leave(self)


class _Changes:
    """What one Delta of a live query will carry, relative to what its observer saw last."""

    __slots__ = ("removed", "upserts")

    def __init__(self) -> None:
        self.upserts: dict[str, MeshNode] = {}
        self.removed: dict[str, None] = {}

    def upsert(self, node: MeshNode) -> None:
        self.removed.pop(node.path, None)
        self.upserts[node.path] = node

    def remove(self, path: str) -> None:
        self.upserts.pop(path, None)
        self.removed[path] = None

    def take(self, provider: str, position: Position) -> QueryFrame | None:
        """The Delta of everything gathered since the last one (``None``: nothing), emptied,
        at ``position``."""
        if not self.upserts and not self.removed:
            return None
        frame = QueryFrame.delta(list(self.upserts.values()), list(self.removed), provider=provider)
        self.upserts, self.removed = {}, {}
        return frame.model_copy(update={"resume_token": position.token})


class _Reached:
    """A snapshot the change feed's deliveries have reached (a live query's next position)."""

    __slots__ = ("snapshot",)

    def __init__(self, snapshot: str) -> None:
        self.snapshot = snapshot


def _resumed_frame(changed: ChangesSince, provider: str) -> QueryFrame:
    """The first frame of a resumed query: what changed since its token, as one Delta."""
    frame = QueryFrame.delta(changed.nodes, changed.removed, provider=provider)
    return frame.model_copy(update={"resume_token": changed.position.token, "resumed": True})


class LiveQueries(Changes):
    """The live queries of :class:`~rxmesh.providers.postgres.PostgresStore`, on its reads and
    its change feed."""

    _name: str
    _feed: ChangeFeed
    _reselects: dict[NodeQuery, tuple[int, _Reread]]
    """The running re-select of each query after a gap, with the gap count when it began."""

    def _reselect(self, query: NodeQuery, gap: int, position: Position) -> _RereadReader:
        """A reader of the recovery of ``query`` after gap number ``gap`` for a view at
        ``position``, shared by every subscription of this store: one that started after that
        gap was declared serves them all, if its read has not begun."""
        running = self._reselects.get(query)
        if running is not None and running[0] >= gap and running[1].joinable:
            return running[1].join(position)
        reread = _Reread()
        reader = reread.join(position)
        entry = (self._feed.book.gaps, reread)
        self._reselects[query] = entry
        task = reread.task = asyncio.ensure_future(self._reread(query, reread))

        def forget(_: asyncio.Future[None]) -> None:
            if self._reselects.get(query) is entry:
                del self._reselects[query]

        task.add_done_callback(forget)
        return reader

    async def _reread(self, query: NodeQuery, reread: _Reread) -> None:
        """Read what changed in ``query`` since its readers' positions, else ``query`` again,
        into ``reread``; its readers get the changes or the batches, and the end (or the error,
        which each of them raises: none is dropped while a reader is left, and the read is
        cancelled once none is)."""
        try:
            changed = await self._changes_since(query, reread.since())
            if changed is not None:
                reread.tell(changed)
            else:
                reread.position = await self._reselect_rows(query, reread.deliver)
        except asyncio.CancelledError as cancelled:
            reread.end(cancelled)
            raise
        except Exception as error:  # noqa: BLE001 - handed to every reader, which raises it
            reread.end(error)
        else:
            reread.end(None)

    async def _reselect_rows(
        self, query: NodeQuery, each: Callable[[str, list[asyncpg.Record]], Awaitable[None]]
    ) -> Position:
        """A gap's re-select of ``query``: its rows to ``each``, batch by batch, in path order;
        the position it read at."""
        return await self._select_batches(query, each)

    def query(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]:
        """One Initial frame, then a Delta per batch of matching committed changes, each frame
        with its resume token.

        Changes that arrive together (the rows of one notification batch, or whatever is queued
        when the query's task gets its turn) make one Delta, so a 1000-row bulk is a handful of
        frames, not 1000, and nothing waits for company. After a declared change-feed gap the
        query reads what changed since its position and emits it as one Delta (nothing if
        nothing changed); where the store cannot tell (module :mod:`._changes`), it re-runs
        (one re-select per query and gap, shared by every subscription of this store) and emits
        the difference. Changes that arrive while a read runs are applied after it,
        de-duplicated by value.

        ``resume_from``: a token of this store answers first with one Delta marked ``resumed``
        of what changed since (removals included; the removal of a path the view may not hold
        is possible: a node that changed while it did not match); anything else (another
        store's token, one past the tombstones' retention, a malformed one) with an Initial
        marked ``reset``.

        A content filter (``where``) is evaluated by the server in the Initial and every
        read, and on every delta by :meth:`~rxmesh.model.NodeQuery.matches`, with the same
        meaning: a node that stops matching leaves the view, one that starts matching enters.

        A query with ``order_by`` or ``limit`` is an ordered window (docs/live-queries.md,
        "Ordered windows"), kept from :meth:`page` and the change feed.
        """
        if query.limit is not None or query.order_by:
            reset, store = resume_from is not None, cast("Store", self)  # the facade is one
            return windowed(store, query, reset=reset, ends=window_ends(self._feed))

        def subscribe(
            observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            events: asyncio.Queue[NodeChange | int | Outlasted | _Reached | None] = (
                asyncio.Queue()
            )
            subscriptions = CompositeDisposable(
                self._feed.changes.subscribe(
                    events.put_nowait, on_completed=lambda: events.put_nowait(None)
                ),
                # Queued behind the changes it follows: once those are applied, it is reached.
                self._feed.positions.subscribe(lambda s: events.put_nowait(_Reached(s))),
                # A gap is queued as its number (counted before it is published).
                self._feed.gaps.subscribe(lambda _: events.put_nowait(self._feed.book.gaps)),
                self._feed.expired.subscribe(events.put_nowait),
            )

            async def run() -> None:
                outlasted = self._feed.outlasted
                # Opened during a loss past the bound: its Initial is fresh, and it gets the
                # bound from now (a standing watch re-reads once per bound, not per backoff).
                later = (
                    None
                    if outlasted is None
                    else asyncio.get_running_loop().call_later(
                        self._feed.loss_bound, events.put_nowait, outlasted
                    )
                )
                try:
                    await follow()
                finally:
                    if later is not None:
                        later.cancel()

            async def opening() -> tuple[dict[str, MeshNode] | None, Position]:
                """The first frame (an Initial, or a resume's Delta), sent; the view it leaves
                (``None``: the client's, which this query does not know) and its position."""
                if resume_from is not None:
                    since = parse_token(resume_from, await self._identity())
                    changed = None if since is None else await self._changes_since(query, since)
                    if changed is not None:
                        observer.on_next(_resumed_frame(changed, self._name))
                        return None, changed.position
                nodes, position = await self._select_at(query)
                observer.on_next(
                    _initial_frame(nodes, self._name, position, reset=resume_from is not None)
                )
                # The subscriber's turn first: this query's index of its rows (a pass over all
                # of them) is its own bookkeeping, needed at the first change.
                await asyncio.sleep(0)
                return {node.path: node for node in nodes}, position

            async def follow() -> None:
                known, position = await opening()
                pending = _Changes()
                while (event := await events.get()) is not None:
                    while True:
                        if isinstance(event, Outlasted):
                            if event is self._feed.outlasted:  # else the feed came back meanwhile
                                if frame := pending.take(self._name, position):
                                    observer.on_next(frame)  # what the feed did deliver
                                raise self._feed.stale_error(event)
                        elif isinstance(event, _Reached):
                            reached = Position.of(position.identity, event.snapshot)
                            if reached.not_before(position):
                                position = reached
                        elif isinstance(event, int):
                            if frame := pending.take(self._name, position):
                                observer.on_next(frame)  # what came before the gap, at once
                            known, position = await self._recover(
                                query, event, known, position, pending, observer
                            )
                        else:
                            self._apply(known, query, event, pending)
                        if events.empty():
                            break
                        event = events.get_nowait()
                        if event is None:
                            break
                    if frame := pending.take(self._name, position):
                        observer.on_next(frame)
                    if event is None:
                        break
                observer.on_completed()

            worker = from_async(run).subscribe(on_error=observer.on_error, scheduler=scheduler)

            return CompositeDisposable(worker, subscriptions)

        return Observable(subscribe)

    async def _recover(
        self,
        query: NodeQuery,
        gap: int,
        known: dict[str, MeshNode] | None,
        position: Position,
        pending: _Changes,
        observer: abc.ObserverBase[QueryFrame],
    ) -> tuple[dict[str, MeshNode] | None, Position]:
        """After gap number ``gap``: gather into ``pending`` what changed since ``position``
        (one read shared by the subscriptions of ``query``); where the store cannot tell, what
        a re-select differs in from ``known``, or, for a resumed view this query does not know,
        send a fresh Initial marked ``reset``. The view and position it leaves."""
        # Joined before anything is awaited: the subscriptions the gap woke together share it.
        reader = self._reselect(query, gap, position)
        try:
            first = await reader.next()
            if isinstance(first, ChangesSince):
                # A long loss can have changed every row: the loop gets a turn between chunks.
                for start in range(0, len(first.nodes), _BUILD_CHUNK):
                    await asyncio.sleep(0)
                    for node in first.nodes[start : start + _BUILD_CHUNK]:
                        if known is None or not _same(known.get(node.path), node):
                            if known is not None:
                                known[node.path] = node
                            pending.upsert(node)
                for start in range(0, len(first.removed), _BUILD_CHUNK):
                    await asyncio.sleep(0)
                    for path in first.removed[start : start + _BUILD_CHUNK]:
                        if known is None or known.pop(path, None) is not None:
                            pending.remove(path)
                return known, first.position
            if known is not None:
                await self._diff(known, first, reader, pending)
                assert reader.reread.position is not None  # (set before the read's end)
                return known, reader.reread.position
        finally:
            reader.leave()
        nodes, position = await self._select_at(query)
        observer.on_next(_initial_frame(nodes, self._name, position, reset=True))
        return {node.path: node for node in nodes}, position

    @staticmethod
    def _apply(
        known: dict[str, MeshNode] | None, query: NodeQuery, change: NodeChange, pending: _Changes
    ) -> None:
        node = change.node
        if change.op == "delete" or (node is not None and not query.matches(node)):
            if known is None or known.pop(change.path, None) is not None:
                pending.remove(change.path)
            return
        if node is None:
            return
        if known is not None:
            if _same(known.get(node.path), node):
                return
            known[node.path] = node
        pending.upsert(node)

    @staticmethod
    async def _diff(
        known: dict[str, MeshNode],
        batch: tuple[str, list[asyncpg.Record]] | ChangesSince | None,
        reader: _RereadReader,
        pending: _Changes,
    ) -> None:
        """Gather into ``pending`` how the re-read rows differ from ``known``, and make them
        ``known``, batch by batch as they come; :data:`_BUILD_CHUNK` rows a loop turn (it may be
        a whole 50k-row snapshot). A batch is let go once compared.

        Only the rows that changed are built: a row whose version, type, creator, creation time
        and request id equal the known node's is the same row state (every change rxmesh makes
        bumps the version, and a path deleted and created again has a new request and creation
        time), so its content is not even decoded.
        """
        seen: set[str] = set()
        reread = reader.reread
        stale: list[asyncpg.Record] = []
        chunk: list[asyncpg.Record] = []
        while batch is not None:
            assert not isinstance(batch, ChangesSince)  # (only ever a recovery's first item)
            partition, rows = batch
            batch = None  # (nothing here holds a batch while the next is awaited)
            for start in range(0, len(rows), _BUILD_CHUNK):
                await asyncio.sleep(0)
                stale = []
                chunk = rows[start : start + _BUILD_CHUNK]
                for row, created_at in zip(chunk, _row_stamps(chunk, partition), strict=True):
                    path = row[0]
                    seen.add(path)
                    old = known.get(path)
                    if (
                        old is None
                        or old.version != row[5]
                        or old.request_id != row[6]
                        or old.created_at != created_at
                        or old.node_type != row[1]
                        or old.created_by != row[3]
                    ):
                        stale.append(row)
                for node in reread.built(stale, partition):
                    if not _same(known.get(node.path), node):
                        known[node.path] = node
                        pending.upsert(node)
            del rows
            stale = chunk = []
            batch = await reader.next()
        if len(known) == len(seen):  # every known path was re-read: nothing was removed
            return
        paths = list(known)
        gone: list[str] = []
        for start in range(0, len(paths), _BUILD_CHUNK * 10):
            await asyncio.sleep(0)
            gone.extend(p for p in paths[start : start + _BUILD_CHUNK * 10] if p not in seen)
        for path in sorted(gone):
            del known[path]
            pending.remove(path)
