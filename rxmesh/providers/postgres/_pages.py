"""Pages: the first nodes of a query in its window order, strictly after a given node, one
bounded ``SELECT`` per partition (its content filter and the keyset condition in SQL), merged;
and the end a window on this store meets when its change feed stays lost past the bound.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence

from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxmesh.model import MeshNode, NodeQuery, validate_path
from rxmesh.providers.postgres._conditions import conditions, scope
from rxmesh.providers.postgres._connections import Connection, Connections
from rxmesh.providers.postgres._errors import MISSING_SCHEMA
from rxmesh.providers.postgres._feed import ChangeFeed, Outlasted
from rxmesh.providers.postgres._order import index_columns, order_sql
from rxmesh.providers.postgres._rows import _stored_nodes_of
from rxmesh.providers.postgres._schema import (
    _LIVE_COLUMNS,
    _LIVE_SETTINGS,
    Schemas,
    quote_identifier,
)

__all__ = ["Pages", "page_statement", "window_ends"]

_PAGE_SETTINGS = _LIVE_SETTINGS + "; SET LOCAL plan_cache_mode = force_custom_plan"
"""A page's statement names its field paths as parameters; only a plan made for their values
(custom) sees ``content #> '{price}'`` and can use an expression index on it, and a pooled
connection's prepared statement would otherwise turn generic after five executions."""


def page_statement(
    table: str, query: NodeQuery, after: MeshNode | None, limit: int
) -> tuple[str, list[object]]:
    """The ``SELECT`` of one partition's page of ``query`` (its prefix, type, content filter
    and the rows strictly after ``after``, in window order, at most ``limit``) and its
    arguments."""
    args: list[object] = []
    under, holds = conditions(query.path_prefix.rstrip("/"), query.node_type, query.where, args)
    tests = under + holds
    order, keyset, values = order_sql(query, after, len(args) + 1)
    args.extend(values)
    if keyset is not None:
        tests.append(keyset)
    args.append(limit)
    where = f" WHERE {' AND '.join(tests)}" if tests else ""
    return (
        f"SELECT {_LIVE_COLUMNS} FROM {table}{where} ORDER BY {order} LIMIT ${len(args)}",
        args,
    )


def window_ends(feed: ChangeFeed) -> Observable[Exception]:
    """What ends a window on this store, as it ends every live query of the store: a loss
    of the change feed past ``feed_loss_bound`` (the window's own transient error). A
    window opened while such a loss lasts gets the bound from its opening."""

    def subscribe(
        observer: abc.ObserverBase[Exception], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        def on_expired(event: Outlasted) -> None:
            if event is feed.outlasted:  # else the feed came back meanwhile
                observer.on_next(feed.stale_error(event))

        subscription = feed.expired.subscribe(on_expired)
        outlasted = feed.outlasted
        later = (
            None
            if outlasted is None
            else asyncio.get_running_loop().call_later(feed.loss_bound, on_expired, outlasted)
        )

        def dispose() -> None:
            subscription.dispose()
            if later is not None:
                later.cancel()

        return Disposable(dispose)

    return Observable(subscribe)


class Pages:
    """The ``page`` verb of :class:`~rxmesh.providers.postgres.PostgresStore`."""

    _connections: Connections
    _schemas: Schemas

    def window_index_statement(self, partition: str, order_by: Sequence[str], name: str) -> str:
        """The ``CREATE INDEX IF NOT EXISTS`` of an index named ``name`` on ``partition``'s
        table that serves a window ordered by ``order_by`` (its first page and every refill
        become a range of the index instead of a scan and a sort). Run it yourself (it is DDL:
        ``CONCURRENTLY`` may be added): rxmesh creates no index on its own.

        Raises:
            ValueError: ``order_by`` is not a valid order (pydantic's ``ValidationError``,
                naming it, as ``NodeQuery`` refuses it), or ``partition`` not a partition.
        """
        validate_path(partition, allow_reserved=False)
        query = NodeQuery(partition=partition, order_by=tuple(order_by))
        schema = quote_identifier(self._schemas.schema_of(partition))
        return (
            f"CREATE INDEX IF NOT EXISTS {quote_identifier(name)} ON {schema}.nodes "
            f"({index_columns(query)})"
        )

    async def page(self, query: NodeQuery, after: MeshNode | None, limit: int) -> list[MeshNode]:
        """The first ``limit`` nodes matching ``query`` (its content filter included) strictly
        after ``after`` in the query's window order (``order_by``, then the path): one
        ``SELECT ... LIMIT`` per partition the query can reach, merged in that order.

        Raises:
            ValueError: ``limit`` is below 1 (a programming error).
        """
        if limit < 1:
            raise ValueError(f"a page holds at least 1 node, not {limit!r}")
        _, wanted = scope(query)

        async def work(conn: Connection) -> list[list[MeshNode]]:
            partitions = wanted if wanted is not None else await self._schemas.partitions(conn)
            pages: list[list[MeshNode]] = []
            for partition in partitions:
                sql, args = page_statement(self._schemas.table(partition), query, after, limit)
                try:
                    async with conn.transaction():
                        await conn.execute(_PAGE_SETTINGS)
                        rows = await conn.fetch(sql, *args)
                except MISSING_SCHEMA:
                    continue
                pages.append(_stored_nodes_of(rows, partition, stamps_as_text=True))
            return pages

        pages = await self._connections.run(f"paging {query!r}", work)
        if len(pages) == 1:
            return pages[0]
        # Each partition's page is in window order already (the SQL order is the model's).
        return list(heapq.merge(*pages, key=query.sort_key))[:limit]
