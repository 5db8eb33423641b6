"""Reads: point reads (fully validated rows), and the batched, path-ordered reads of a live
query's Initial and of a gap's re-select, through a cursor per partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from rxmesh._util.path_order import PathOrdered, strictly_ascending
from rxmesh.model import Filter, MeshNode, NodeQuery, partition_of, validate_path
from rxmesh.providers.postgres._conditions import conditions, scope
from rxmesh.providers.postgres._connections import Connection, Connections
from rxmesh.providers.postgres._errors import MISSING_SCHEMA
from rxmesh.providers.postgres._positions import Position
from rxmesh.providers.postgres._rows import _BUILD_CHUNK, _node_from_row, _stored_nodes_of
from rxmesh.providers.postgres._schema import _COLUMNS, _LIVE_COLUMNS, _LIVE_SETTINGS, Schemas

__all__ = ["Reads"]

_STREAMED = _LIVE_SETTINGS + "; SET LOCAL enable_sort = off"
"""The settings of a read consumed batch by batch (an Initial, a gap's re-select): no plan that
sorts. A sort must finish the whole scan before its first row, so the first batch would wait for
all of them and the build of each batch could not overlap the server's work on the next; the
primary key gives the path order as the rows are found. A content filter makes the planner guess
few rows and choose a scan and a sort otherwise."""

_POSITION_NOW = (
    "SELECT pg_current_snapshot()::text,"
    " (SELECT system_identifier FROM pg_control_system())::text,"
    " (SELECT oid FROM pg_database WHERE datname = current_database())::text"
)
"""A snapshot taken now, and the identity of the database it belongs to (the system's, the
same on a promoted standby, and the database's)."""

_VALIDATE_STEP = 2000
"""Paths of a read checked per loop step."""
_FETCH_BATCH = 2000
"""Rows a live query's cursor fetches per round trip (built or compared ``_BUILD_CHUNK`` at a
time): a 50k-row read is 25 round trips (the next one always under way while a batch is built),
and no socket read decodes more than this. Small enough that a batch's records die young
instead of adding to the collector's full passes (docs/performance.md, Stop 28)."""


def _paths_ascend(rows: Sequence[asyncpg.Record], after: str | None) -> bool:
    """Whether the rows' paths are strictly ascending, and above ``after``."""
    paths = [row[0] for row in rows]
    if after is not None and paths and not after < paths[0]:
        return False
    return strictly_ascending(paths)


async def _read_ahead(
    cursor: asyncpg.cursor.Cursor[asyncpg.Record],
    partition: str,
    each: Callable[[str, list[asyncpg.Record]], Awaitable[None]],
) -> None:
    """Hand ``each`` the cursor's rows batch by batch, the next batch already asked for while
    ``each`` builds this one: the server reads and sends it (on its own core) while this
    process builds, instead of waiting for the build to end. A batch
    shorter than :data:`_FETCH_BATCH` is the last one (no round trip for an empty batch).

    The connection runs one command at a time, and only the read-ahead runs on it while
    ``each`` works. If ``each`` raises (or its task is cancelled), the read-ahead is cancelled
    and awaited before the error goes on, so the transaction ends on a connection with no
    command in flight; a failure of the read-ahead itself is added to that error as a note.
    """
    rows = await cursor.fetch(_FETCH_BATCH)
    while rows:
        ahead = (
            asyncio.ensure_future(cursor.fetch(_FETCH_BATCH)) if len(rows) == _FETCH_BATCH else None
        )
        try:
            await each(partition, rows)
        except BaseException as error:
            if ahead is not None:
                ahead.cancel()
                await asyncio.wait([ahead])
                if not ahead.cancelled() and ahead.exception() is not None:
                    error.add_note(f"the read of the next batch failed too: {ahead.exception()!r}")
            raise
        rows = await ahead if ahead is not None else []


def _query_statement(
    table: str, prefix: str, node_type: str | None, where: Filter | None = None
) -> tuple[str, list[object]]:
    """The SELECT of a live query's rows, ordered by path, and its arguments: one statement per
    shape of the query (a content filter's shape included: its values are parameters), with no
    condition that a parameter switches off.

    A pooled connection keeps its prepared statements, and after five executions PostgreSQL may
    plan one generically, for any parameters. ``($1 = '' OR path = $1 OR ...)`` was planned, for
    a whole partition, as a scan of the index in path order while its plan was custom (the
    planner saw ``'' = ''``) and as a sequential scan and a sort spilling to disk once generic,
    so every Initial and gap re-select of a long-lived pool would run at half speed. Each shape
    here has one plan whatever its parameters.
    """
    args: list[object] = []
    under, holds = conditions(prefix, node_type, where, args)
    conditions_ = under + holds
    clause = f" WHERE {' AND '.join(conditions_)}" if conditions_ else ""
    return f"SELECT {_LIVE_COLUMNS} FROM {table}{clause} ORDER BY path", args


class Reads:
    """The reads of :class:`~rxmesh.providers.postgres.PostgresStore`."""

    _connections: Connections
    _schemas: Schemas

    async def read(self, path: str) -> MeshNode | None:
        """The node at ``path``; ``None`` for a clean absence (also: no such partition)."""
        validate_path(path)
        table = self._schemas.table(partition_of(path))

        async def work(conn: Connection) -> MeshNode | None:
            try:
                row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", path)
            except MISSING_SCHEMA:
                return None  # the partition does not exist yet: a clean absence
            return None if row is None else _node_from_row(row)

        return await self._connections.run(f"reading '{path}'", work)

    async def read_many(self, paths: Sequence[str]) -> dict[str, MeshNode]:
        """The nodes present among ``paths``, one query per partition."""
        for start in range(0, len(paths), _VALIDATE_STEP):
            if start:
                await asyncio.sleep(0)  # a 10,000-path read never holds the loop to check them
            for path in paths[start : start + _VALIDATE_STEP]:
                validate_path(path)
        if not paths:
            return {}
        first = partition_of(paths[0])
        under = first + "/"
        by_partition: dict[str, list[str]] = {}
        if all(path.startswith(under) or path == first for path in paths):
            by_partition[first] = list(paths)  # the usual read: one partition's paths
        else:
            for path in paths:
                by_partition.setdefault(partition_of(path), []).append(path)

        async def work(conn: Connection) -> dict[str, MeshNode]:
            found: dict[str, MeshNode] = {}
            for partition, wanted in by_partition.items():
                try:
                    rows = await conn.fetch(
                        f"SELECT {_COLUMNS} FROM {self._schemas.table(partition)} "
                        "WHERE path = ANY($1::text[])",
                        wanted,
                    )
                except MISSING_SCHEMA:
                    continue
                for row in rows:
                    node = _node_from_row(row)
                    found[node.path] = node
            return found

        return await self._connections.run(f"reading {len(paths)} path(s)", work)

    _position_identity: str | None = None

    async def _position_now(self, conn: Connection) -> Position:
        """The position of a snapshot taken now, before the reads that follow it on ``conn``
        (they see at least what it sees: a token for their result never skips a change)."""
        row = await conn.fetchrow(_POSITION_NOW)
        assert row is not None  # (a SELECT of constants has its one row)
        snapshot, system, database = row
        identity = f"{system}_{database}_{self._schemas.prefix}"
        self._position_identity = identity
        return Position.of(identity, snapshot)

    async def _identity(self) -> str:
        """This store's database identity (asked once)."""
        if self._position_identity is None:
            await self._connections.run("reading the store's position", self._position_now)
        assert self._position_identity is not None
        return self._position_identity

    async def _select(self, query: NodeQuery) -> list[MeshNode] | PathOrdered:
        """:meth:`_select_at` without its position."""
        return (await self._select_at(query))[0]

    async def _select_at(self, query: NodeQuery) -> tuple[list[MeshNode] | PathOrdered, Position]:
        """The nodes matching ``query``, ordered by path: built batch by batch as the rows come,
        so a batch's records are gone before the next arrives (a 50k-row read never holds 50k
        records beside the nodes, and no single read of the socket decodes them all). They come
        as a :class:`PathOrdered` when the rows came strictly ordered by path (checked on the
        records as they come: one pass less over the nodes), else as the list to sort."""
        nodes: list[MeshNode] = []
        ascending = True

        async def build(partition: str, rows: list[asyncpg.Record]) -> None:
            nonlocal ascending
            for start in range(0, len(rows), _BUILD_CHUNK):
                await asyncio.sleep(0)
                chunk = rows[start : start + _BUILD_CHUNK]
                if ascending:
                    ascending = _paths_ascend(chunk, nodes[-1].path if nodes else None)
                nodes.extend(_stored_nodes_of(chunk, partition, stamps_as_text=True))

        position = await self._select_batches(query, build)
        return (PathOrdered.of_sorted(nodes) if ascending else nodes), position

    async def _select_batches(
        self, query: NodeQuery, each: Callable[[str, list[asyncpg.Record]], Awaitable[None]]
    ) -> Position:
        """Hand ``each`` the rows matching ``query`` in :data:`_FETCH_BATCH`-row batches, ordered
        by path, through a cursor per partition (one transaction, one snapshot, each); the
        position taken before the first of them."""
        prefix, wanted = scope(query)

        async def work(conn: Connection) -> Position:
            position = await self._position_now(conn)
            partitions = wanted if wanted is not None else await self._schemas.partitions(conn)
            for partition in partitions:
                try:
                    async with conn.transaction():  # a cursor lives in a transaction
                        await conn.execute(_STREAMED)
                        sql, args = _query_statement(
                            self._schemas.table(partition), prefix, query.node_type, query.where
                        )
                        cursor = await conn.cursor(sql, *args)
                        await _read_ahead(cursor, partition, each)
                except MISSING_SCHEMA:
                    continue
            return position

        return await self._connections.run(f"querying {query!r}", work)
