"""Writes: creates (alone, or grouped behind a partition's busy lanes), bulk windows, and the
compare-and-set verbs update, delete and move. A row is never overwritten by a create; a write
whose outcome is unclear reads the row there to decide it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
import asyncpg.exceptions as pgexc
from loguru import logger
from reactivex import Observable, abc

from rxmesh.aio import from_async
from rxmesh.exceptions import StoreConflictError, StoreVersionConflictError
from rxmesh.faults import is_no_answer_in_time, is_transient_connect_fault
from rxmesh.model import MeshNode, WindowCommitted, partition_of, validate_path
from rxmesh.providers._store import DEFAULT_WRITE_WINDOW
from rxmesh.providers.postgres._connections import Connection, Connections, is_closed
from rxmesh.providers.postgres._errors import MISSING_SCHEMA
from rxmesh.providers.postgres._groups import WriteGroups
from rxmesh.providers.postgres._rows import (
    _content_text,
    _encode_content,
    _for_jsonb,
    _node_from_row,
)
from rxmesh.providers.postgres._schema import _COLUMNS, _WRITE_COLUMNS, Schemas, quote_identifier

__all__ = ["Writes"]

_WRITE_LANES = 2
"""Creates of one partition in flight at once before the next ones go as a group
(:class:`~rxmesh.providers.postgres._groups.WriteGroups`)."""


def _path_of(member: tuple[MeshNode, str | None]) -> str:
    return member[0].path


def _size_of(member: tuple[MeshNode, str | None]) -> int:
    """A create's content text, the part of its row that can be large (up to 1 MB)."""
    return 0 if member[1] is None else len(member[1])


_RECORDS_STEP = 250
"""Rows of a bulk window encoded per step; the loop (and the window on the wire) gets a turn
between two steps."""


async def _window_records(chunk: list[MeshNode]) -> list[tuple[Any, ...]]:
    """The rows of a bulk window as records in :data:`_WRITE_COLUMNS` order, a step at a time
    (each step after a turn of the loop, so the previous window is sent first)."""
    dumps = _encode_content
    records: list[tuple[Any, ...]] = []
    for start in range(0, len(chunk), _RECORDS_STEP):
        await asyncio.sleep(0)
        records.extend(
            (
                n.path,
                n.node_type,
                None if n.content is None else _for_jsonb(dumps(n.content)),
                n.created_by,
                n.created_at,
                max(1, n.version),
                n.request_id,
            )
            for n in chunk[start : start + _RECORDS_STEP]
        )
    return records


def _insert_free_paths(table: str) -> str:
    """The INSERT of rows given as one array per column (:data:`_WRITE_COLUMNS` order) that
    lands the free paths, skips the taken ones, and returns the paths that landed."""
    return (
        f"INSERT INTO {table} ({', '.join(_WRITE_COLUMNS)})"
        " SELECT p, t, c::jsonb, b, a, v, r FROM unnest($1::text[], $2::text[],"
        " $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[])"
        " AS u(p, t, c, b, a, v, r) ON CONFLICT (path) DO NOTHING RETURNING path"
    )


class Writes:
    """The writes of :class:`~rxmesh.providers.postgres.PostgresStore`."""

    _name: str
    _connections: Connections
    _schemas: Schemas
    _groups: WriteGroups[str, tuple[MeshNode, str | None]] | None

    async def write(self, node: MeshNode) -> MeshNode:
        """Insert ``node`` (version ``max(1, node.version)``) if its path is free.

        A row already there with the same request id is an ambiguous commit that landed: it is
        returned as if written now. Another request's row is a StoreConflictError.
        """
        validate_path(node.path)
        partition = node.partition
        table = self._schemas.table(partition)

        # The row as written is the node as sent (the INSERT stores exactly these values), so
        # only the path comes back: no row is decoded and re-validated on the hot path.
        written = node if node.version >= 1 else node.model_copy(update={"version": 1})
        content = _content_text(node)

        async def insert(conn: Connection) -> asyncpg.Record | None:
            return await conn.fetchrow(
                f"INSERT INTO {table} (path, node_type, content, created_by, created_at, version,"
                " request_id) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7)"
                " ON CONFLICT (path) DO NOTHING RETURNING path",
                node.path,
                node.node_type,
                content,
                node.created_by,
                node.created_at,
                max(1, node.version),
                node.request_id,
            )

        async def work(conn: Connection) -> MeshNode:
            row = await self._schemas.with_schema(conn, partition, lambda: insert(conn))
            if row is not None:
                return written
            return await decide(conn)

        async def decide(conn: Connection) -> MeshNode:
            """The INSERT wrote nothing: the row there says what the write's outcome is."""
            existing = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", node.path
            )
            if existing is None:  # deleted between the two statements: try once more
                row = await insert(conn)
                if row is not None:
                    return written
                existing = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", node.path
                )
            if existing is not None and (
                node.request_id is not None and existing["request_id"] == node.request_id
            ):
                return _node_from_row(existing)  # an ambiguous commit that did land
            raise StoreConflictError(
                f"store '{self._name}': a node already exists at '{node.path}'",
                path=node.path,
                existing_request_id=None if existing is None else existing["request_id"],
                store=self._name,
            )

        groups = self._groups
        if groups is None:
            return await self._connections.run(f"writing '{node.path}'", work)
        if groups.enter(partition):
            try:
                return await self._connections.run(f"writing '{node.path}'", work)
            finally:
                groups.leave(partition)
        landed = await groups.join(partition, (node, content))
        if landed:
            return written
        # Taken: the row there decides. Refused whole (None): this write alone, from the start.
        return await self._connections.run(
            f"writing '{node.path}'", work if landed is None else decide
        )

    async def _write_group(
        self, partition: str, members: list[tuple[MeshNode, str | None]]
    ) -> set[str] | None:
        """Concurrent creates of one partition (:class:`WriteGroups`) in one statement, its own
        transaction: the paths that landed. The rest were taken; each of those members decides
        its outcome alone.

        ``None``: the server evaluated the statement and refused it (a row it cannot store, say
        a content with ``NaN``, which ``jsonb`` refuses): nothing was written, and each member
        is written alone, so the refusal is the answer of the member it concerns only. Anything
        else is raised: every member's outcome (a fault the one rule calls unreachable or no
        answer in time, and anything that is not the server's refusal).

        The rows go in path order, so two groups in flight in one partition take their rows'
        locks in one order and cannot deadlock each other.
        """
        table = self._schemas.table(partition)
        members = sorted(members, key=_path_of)
        nodes = [node for node, _ in members]
        columns = (
            [n.path for n in nodes],
            [n.node_type for n in nodes],
            [content for _, content in members],
            [n.created_by for n in nodes],
            [n.created_at for n in nodes],
            [max(1, n.version) for n in nodes],
            [n.request_id for n in nodes],
        )

        async def insert(conn: Connection) -> list[asyncpg.Record]:
            return await conn.fetch(_insert_free_paths(table), *columns)

        async def work(conn: Connection) -> set[str]:
            rows = await self._schemas.with_schema(conn, partition, lambda: insert(conn))
            return {row[0] for row in rows}

        first = nodes[0].path
        try:
            return await self._connections.run(
                f"writing '{first}' with {len(nodes) - 1} other concurrent create(s) of "
                f"partition '{partition}' in one statement",
                work,
            )
        except pgexc.PostgresError as exc:
            if is_transient_connect_fault(exc) or is_no_answer_in_time(exc):
                raise
            logger.bind(partition=partition, sqlstate=exc.sqlstate, rows=len(nodes)).debug(
                "a group of creates was refused whole ({}: {}); writing its members one by one",
                type(exc).__name__,
                exc,
            )
            return None

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = DEFAULT_WRITE_WINDOW
    ) -> Observable[WindowCommitted]:
        """Insert in windows of at most ``window`` rows per partition, one transaction each.

        A window is first sent as one binary ``COPY`` into the partition's table, in its own
        transaction: when no path of it is taken, every row lands at COPY's cost. When one is
        (a unique violation: the row of an earlier write, of a concurrent writer, or a path twice
        in the window), that transaction rolls back whole and the window is sent again as one
        ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING path``, which lands
        the free paths and skips the taken ones; the later windows of that partition go straight
        to it. Either way a window is one transaction, and a row is never overwritten. Never
        ``executemany`` (cancelling a streaming executemany hangs asyncpg); no session state
        (nothing outlives the window's transaction, so it works behind a transaction pooler).
        """
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        batch = list(nodes)

        def subscribe(
            observer: abc.ObserverBase[WindowCommitted],
            scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            async def run() -> None:
                if batch:
                    await self._write_windows(batch, window, observer.on_next)
                observer.on_completed()

            return from_async(run).subscribe(on_error=observer.on_error, scheduler=scheduler)

        return Observable(subscribe)

    async def _write_windows(
        self, nodes: list[MeshNode], window: int, emit: Callable[[WindowCommitted], None]
    ) -> None:
        by_partition: dict[str, list[MeshNode]] = {}
        for node in nodes:  # paths were validated when the MeshNode was built
            by_partition.setdefault(partition_of(node.path), []).append(node)
        windows = [
            (partition, index, members[start : start + window])
            for partition, members in by_partition.items()
            for index, start in enumerate(range(0, len(members), window))
        ]

        async def work(conn: Connection) -> None:
            # One pooled connection for the whole batch; every window is its own transaction,
            # committed and reported before the next one is sent. The rows of the next window
            # are encoded while this one is on the server (its COPY, trigger and commit), so the
            # client's work and the server's overlap, as two processes on two cores do.
            conflicts: set[str] = set()  # partitions where a window met a taken path
            records = await _window_records(windows[0][2])
            for position, (partition, index, chunk) in enumerate(windows):
                sending = asyncio.ensure_future(
                    self._schemas.with_schema(
                        conn,
                        partition,
                        functools.partial(
                            self._insert_window, conn, partition, chunk, records, conflicts
                        ),
                    )
                )
                try:
                    if position + 1 < len(windows):
                        records = await _window_records(windows[position + 1][2])
                    landed = await sending
                except BaseException:
                    if not sending.done():  # cancelled while encoding: the window goes too
                        sending.cancel()
                        await asyncio.wait([sending])
                    raise
                emit(WindowCommitted(partition=partition, index=index, paths=landed))

        await self._connections.run(f"writing {len(nodes)} node(s) in windows of {window}", work)

    async def _insert_window(
        self,
        conn: Connection,
        partition: str,
        chunk: list[MeshNode],
        records: list[tuple[Any, ...]],
        conflicts: set[str],
    ) -> tuple[str, ...]:
        """Write one window in one transaction; the paths that landed, in window order."""
        schema = self._schemas.schema_of(partition)
        try:
            if partition not in conflicts:
                try:  # one statement outside a transaction block: its own transaction
                    await conn.copy_records_to_table(
                        "nodes",
                        schema_name=schema,
                        records=records,
                        columns=_WRITE_COLUMNS,
                        timeout=self._connections.command_timeout,
                    )
                except pgexc.UniqueViolationError:
                    conflicts.add(partition)  # rolled back whole: decide row by row below
                else:
                    return tuple(n.path for n in chunk)
            rows = await conn.fetch(
                _insert_free_paths(f"{quote_identifier(schema)}.nodes"),
                *(list(column) for column in zip(*records, strict=True)),
                timeout=self._connections.command_timeout,
            )
        except asyncio.CancelledError:
            if not is_closed(conn):
                conn.terminate()  # never reuse a connection whose bulk call was cancelled
            raise
        landed = {row["path"] for row in rows}
        return tuple(n.path for n in chunk if n.path in landed)

    # Update, delete and move are compare-and-set when given a basis (``expected_version`` and,
    # optionally, ``expected_request_id``: the id of the write that produced that version). The
    # condition is in the statement's WHERE, so it holds at the row lock; when no row matched, one
    # read of the row says why (absent, this request's own landed write, or a conflict).

    @staticmethod
    def _own_write(row: asyncpg.Record, request_id: str, expected_version: int | None) -> bool:
        """Whether ``row`` is what an update or move with ``request_id`` wrote (an earlier try):
        the version after its basis (without one, never version 1, which a create writes)."""
        if row["request_id"] != request_id:
            return False
        if expected_version is not None:
            return bool(row["version"] == expected_version + 1)
        return bool(row["version"] > 1)

    def _version_conflict(
        self, path: str, expected_version: int, row: asyncpg.Record | None
    ) -> StoreVersionConflictError:
        now = (
            "gone"
            if row is None
            else (f"at version {row['version']} (request {row['request_id']!r})")
        )
        return StoreVersionConflictError(
            f"compare-and-set refused at '{path}' in store '{self._name}': the request was based "
            f"on version {expected_version}, the row is {now}; another write came first",
            path=path,
            expected_version=expected_version,
            actual_version=None if row is None else row["version"],
            actual_request_id=None if row is None else row["request_id"],
            store=self._name,
        )

    async def update(
        self,
        node: MeshNode,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """Replace type and content of an existing node, version + 1; ``None`` if absent.

        ``request_id`` (when given) becomes the row's; a row already carrying it is returned
        unchanged (this request's update landed). With ``expected_version``: a compare-and-set
        (:class:`StoreVersionConflictError` when another write came first).
        """
        validate_path(node.path)
        table = self._schemas.table(node.partition)

        async def work(conn: Connection) -> MeshNode | None:
            try:
                row = await conn.fetchrow(
                    f"UPDATE {table} SET node_type = $2, content = $3::jsonb,"
                    " version = version + 1, request_id = COALESCE($6::text, request_id)"
                    " WHERE path = $1 AND ($4::bigint IS NULL OR version = $4)"
                    " AND ($5::text IS NULL OR request_id = $5)"
                    # Its own landed update (same id, a version only an update writes) is not
                    # applied again; a create's row with the same id is.
                    " AND ($6::text IS NULL OR $4::bigint IS NOT NULL"
                    " OR request_id IS DISTINCT FROM $6 OR version = 1)"
                    f" RETURNING {_COLUMNS}",
                    node.path,
                    node.node_type,
                    _content_text(node),
                    expected_version,
                    expected_request_id,
                    request_id,
                )
                if row is not None:
                    return _node_from_row(row)
                if expected_version is None and request_id is None:
                    return None
                current = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", node.path
                )
            except MISSING_SCHEMA:
                return None
            if current is None:
                return None
            if request_id is not None and self._own_write(current, request_id, expected_version):
                return _node_from_row(current)  # this request's update did land
            assert expected_version is not None  # else the UPDATE matched the row
            raise self._version_conflict(node.path, expected_version, current)

        return await self._connections.run(f"updating '{node.path}'", work)

    async def delete(
        self,
        path: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
    ) -> bool:
        """Delete the node at ``path`` (not its children); ``False`` if absent. With
        ``expected_version``: a compare-and-set, as for :meth:`update`."""
        validate_path(path)
        table = self._schemas.table(partition_of(path))

        async def work(conn: Connection) -> bool:
            try:
                row = await conn.fetchrow(
                    f"DELETE FROM {table} WHERE path = $1"
                    " AND ($2::bigint IS NULL OR version = $2)"
                    " AND ($3::text IS NULL OR request_id = $3) RETURNING path",
                    path,
                    expected_version,
                    expected_request_id,
                )
                if row is not None:
                    return True
                if expected_version is None:
                    return False
                current = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", path
                )
            except MISSING_SCHEMA:
                return False
            if current is None:
                return False
            raise self._version_conflict(path, expected_version, current)

        return await self._connections.run(f"deleting '{path}'", work)

    async def move(
        self,
        source: str,
        target: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """Move a node to a free path in one transaction; ``None`` if ``source`` is absent.

        ``request_id`` (when given) becomes the moved row's; a target carrying it with the source
        gone is this request's landed move, returned. With ``expected_version`` the source is
        compared-and-set, as for :meth:`update`.
        """
        validate_path(source)
        validate_path(target)
        source_table = self._schemas.table(partition_of(source))
        target_partition = partition_of(target)
        target_table = self._schemas.table(target_partition)

        async def landed(conn: Connection) -> MeshNode | None:
            """The target row, if this request's move put it there (the source being gone)."""
            if request_id is None:
                return None
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM {target_table} WHERE path = $1", target
            )
            if row is None or not self._own_write(row, request_id, expected_version):
                return None
            return _node_from_row(row)

        async def work(conn: Connection) -> MeshNode | None:
            if target_partition not in self._schemas.ensured:
                await self._schemas.ensure(conn, target_partition)
            async with conn.transaction():
                try:
                    row = await conn.fetchrow(
                        f"DELETE FROM {source_table} WHERE path = $1"
                        " AND ($2::bigint IS NULL OR version = $2)"
                        " AND ($3::text IS NULL OR request_id = $3)"
                        f" RETURNING {_COLUMNS}",
                        source,
                        expected_version,
                        expected_request_id,
                    )
                    if row is None:
                        current = await conn.fetchrow(
                            f"SELECT {_COLUMNS} FROM {source_table} WHERE path = $1", source
                        )
                except MISSING_SCHEMA:
                    return None
                if row is None:
                    if current is None:
                        return await landed(conn)
                    assert expected_version is not None  # else the DELETE matched the row
                    raise self._version_conflict(source, expected_version, current)
                if source == target:  # taken, by the node itself: refused (rolled back), as the
                    raise StoreConflictError(  # embedded store refuses it
                        f"store '{self._name}': cannot move '{source}' onto itself: "
                        "a node already exists there",
                        path=target,
                        existing_request_id=row["request_id"],
                        store=self._name,
                    )
                moved = await conn.fetchrow(
                    f"INSERT INTO {target_table} (path, node_type, content, created_by,"
                    " created_at, version, request_id) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7)"
                    f" ON CONFLICT (path) DO NOTHING RETURNING {_COLUMNS}",
                    target,
                    row["node_type"],
                    row["content"],
                    row["created_by"],
                    row["created_at"],
                    row["version"] + 1,
                    request_id if request_id is not None else row["request_id"],
                )
                if moved is None:
                    existing = await conn.fetchval(
                        f"SELECT request_id FROM {target_table} WHERE path = $1", target
                    )
                    raise StoreConflictError(
                        f"store '{self._name}': cannot move '{source}' to '{target}': "
                        "a node already exists there",
                        path=target,
                        existing_request_id=existing,
                        store=self._name,
                    )
                return _node_from_row(moved)

        try:
            return await self._connections.run(f"moving '{source}' to '{target}'", work)
        except MISSING_SCHEMA:
            self._schemas.ensured.discard(target_partition)
            raise
