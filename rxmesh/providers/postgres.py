"""The PostgreSQL store (asyncpg): a schema per partition, LISTEN/NOTIFY change feed.

This is the only module of rxmesh that imports asyncpg. Layout: partition ``P`` lives in the
schema ``"<schema_prefix>P"`` (default prefix ``rxmesh_``; partitions are case-sensitive and the
quoted identifier keeps their case, so the mapping is injective), one ``nodes`` table per schema.
Statement-level triggers ``pg_notify`` small payloads on a single channel: ``[schema, op,
[[path, version], ...]]``, one per ~6 kB of changed rows (a bulk window of 1000 rows is a handful
of NOTIFYs, not 1000); the change feed fetches the rows itself and reports one change per row.

Every driver/network failure crosses :meth:`PostgresStore._raise_at_boundary`, the ONE place
where asyncpg's shapes (measured in ``shared/design/asyncpg-faults.md``) become
:class:`~rxmesh.exceptions.StoreError` with the right sqlstate, ``raise ... from exc``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, NoReturn, TypeVar, cast
from urllib.parse import urlparse

import asyncpg
import asyncpg.exceptions as pgexc
from asyncpg.pool import PoolConnectionProxy
from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable
from reactivex.subject import Subject

from rxmesh.aio import from_async
from rxmesh.exceptions import StoreConflictError, StoreError, StorePoolExhaustedError
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
    validate_path,
)
from rxmesh.providers._store import DEFAULT_WRITE_WINDOW

__all__ = [
    "DEFAULT_RECONNECT_BACKOFF",
    "DEFAULT_SCHEMA_PREFIX",
    "PostgresStore",
    "quote_identifier",
    "schema_for_partition",
]

T = TypeVar("T")

DEFAULT_SCHEMA_PREFIX = "rxmesh_"
"""Schemas of partitions are named ``<prefix><partition>``."""

DEFAULT_RECONNECT_BACKOFF: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0)
"""Delays (s) between re-connect attempts of the change-feed listener; the last one repeats."""

_PREFIX_RULE = re.compile(r"[a-z][a-z0-9_]{0,14}")
_COLUMNS = "path, node_type, content::text AS content, created_by, created_at, version, request_id"
_MISSING_SCHEMA = (pgexc.UndefinedTableError, pgexc.InvalidSchemaNameError)
_DRIVER_FAULTS = (OSError, pgexc.PostgresError, pgexc.InterfaceError, pgexc.InternalClientError)

_Stage = Literal["connect", "acquire", "query"]
_Connection = asyncpg.Connection | PoolConnectionProxy


def quote_identifier(name: str) -> str:
    """Quote ``name`` as a PostgreSQL identifier (double quotes, embedded quotes doubled)."""
    if not name or "\x00" in name:
        raise ValueError(f"not a valid identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def schema_for_partition(partition: str, prefix: str = DEFAULT_SCHEMA_PREFIX) -> str:
    """The (unquoted) schema name of ``partition``: ``prefix + partition``, case kept.

    The partition is validated by the path rules first (``[A-Za-z0-9._-]``, at most 48
    characters, not reserved), so the name fits PostgreSQL's 63-byte identifiers.
    """
    validate_path(partition, allow_reserved=False)
    if "/" in partition:
        raise ValueError(f"{partition!r} is a path, not a partition")
    return prefix + partition


def _dsn_name(dsn: str) -> str:
    parsed = urlparse(dsn)
    host = parsed.hostname or "localhost"
    port = parsed.port or 5432
    database = parsed.path.lstrip("/") or parsed.username or "postgres"
    return f"postgres@{host}:{port}/{database}"


def _is_closed(conn: _Connection) -> bool:
    """Whether ``conn`` is closed; a pool proxy the pool already detached (because its
    connection closed while in use) counts as closed."""
    try:
        return conn.is_closed()
    except pgexc.InterfaceError:
        return True


def _now() -> datetime:
    return datetime.now(UTC)


def _node_from_row(row: asyncpg.Record) -> MeshNode:
    content = row["content"]
    return MeshNode(
        path=row["path"],
        node_type=row["node_type"],
        content=json.loads(content) if content is not None else None,
        created_by=row["created_by"],
        created_at=row["created_at"],
        version=row["version"],
        request_id=row["request_id"],
    )


def _content_text(node: MeshNode) -> str | None:
    return None if node.content is None else json.dumps(node.content)


class _Hot:
    """A hot stream with an honest count of its subscribers."""

    def __init__(self) -> None:
        self.subject: Subject[Any] = Subject()

    @property
    def observed(self) -> bool:
        return bool(self.subject.observers)


class PostgresStore:
    """A :class:`~rxmesh.providers.Store` on PostgreSQL through asyncpg.

    Args:
        dsn: a libpq-style URL (``postgresql://user@host:port/db``).
        name: the printable name; default ``"postgres@host:port/db"`` (never a password).
        min_size: pool minimum size.
        max_size: pool maximum size.
        command_timeout: seconds, set on every connection (a stall then ends).
        connect_timeout: seconds for one connection attempt.
        heartbeat_interval: seconds between ``SELECT 1`` probes of the listener connection.
        heartbeat_timeout: seconds a probe may take before the listener is terminated.
        reconnect_backoff: delays between listener re-connect attempts; the last repeats.
        acquire_timeout: seconds to wait for a pool connection (then
            :class:`~rxmesh.exceptions.StorePoolExhaustedError` if the pool was full).
        schema_prefix: prefix of partition schemas (``[a-z][a-z0-9_]{0,14}``); the NOTIFY
            channel is ``<prefix>changes``. Two stores with different prefixes share nothing.

    Use ``async with PostgresStore(dsn) as store:`` or ``await store.start()`` /
    ``await store.close()``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        name: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float = 2.0,
        reconnect_backoff: Sequence[float] = DEFAULT_RECONNECT_BACKOFF,
        acquire_timeout: float = 10.0,
        schema_prefix: str = DEFAULT_SCHEMA_PREFIX,
    ) -> None:
        if not _PREFIX_RULE.fullmatch(schema_prefix):
            raise ValueError(f"schema_prefix {schema_prefix!r} must match {_PREFIX_RULE.pattern}")
        if not reconnect_backoff:
            raise ValueError("reconnect_backoff must not be empty")
        self._dsn = dsn
        self._name = name or _dsn_name(dsn)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._connect_timeout = connect_timeout
        self._heartbeat_interval = heartbeat_interval
        self._heartbeat_timeout = heartbeat_timeout
        self._backoff = tuple(reconnect_backoff)
        self._acquire_timeout = acquire_timeout
        self._prefix = schema_prefix
        self._channel = schema_prefix + "changes"
        self._pool: asyncpg.Pool | None = None
        self._in_use = 0
        self._ensured: set[str] = set()
        self._closing = False
        self._changes = _Hot()
        self._gaps = _Hot()
        self._answers = _Hot()
        self._listen_conn: _Connection | None = None
        self._listen_lock = asyncio.Lock()
        self._lost = asyncio.Event()
        self._notifications: asyncio.Queue[str] = asyncio.Queue()
        self._feed_task: asyncio.Task[None] | None = None
        self._dispatch_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def name(self) -> str:
        """``postgres@host:port/db`` unless given."""
        return self._name

    @property
    def schema_prefix(self) -> str:
        """The prefix of this store's partition schemas."""
        return self._prefix

    @property
    def feed_backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection (``None`` while it is down)."""
        conn = self._listen_conn
        return None if conn is None or conn.is_closed() else conn.get_server_pid()

    def schema_of(self, partition: str) -> str:
        """The unquoted schema name of ``partition`` in this store."""
        return schema_for_partition(partition, self._prefix)

    async def start(self) -> None:
        """Open the pool and the dedicated LISTEN connection (the first LISTEN declares no gap).

        Raises:
            StoreError: the database could not be reached (mapped; see the module docstring).
        """
        if self._pool is not None:
            return
        self._closing = False
        try:
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                command_timeout=self._command_timeout,
                timeout=self._connect_timeout,
                server_settings={"application_name": "rxmesh"},
            )
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation="opening the pool", stage="connect")
        self._pool = pool
        try:
            await self._open_listener()
        except BaseException:
            await pool.close()
            self._pool = None
            raise
        self._dispatch_task = asyncio.create_task(self._dispatch(), name=f"{self._name} feed")
        self._feed_task = asyncio.create_task(self._watch_feed(), name=f"{self._name} listener")

    async def close(self) -> None:
        """Stop the change feed, close the pool, and complete the hot streams."""
        self._closing = True
        for task in (self._feed_task, self._dispatch_task):
            if task is not None:
                task.cancel()
        for task in (self._feed_task, self._dispatch_task):
            if task is not None:
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise
        self._feed_task = self._dispatch_task = None
        conn, self._listen_conn = self._listen_conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        for hot in (self._changes, self._gaps, self._answers):
            hot.subject.on_completed()

    async def __aenter__(self) -> PostgresStore:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ the boundary

    def _raise_at_boundary(
        self,
        exc: BaseException,
        *,
        operation: str,
        stage: _Stage,
        connection: _Connection | None = None,
        connection_usable: bool | None = None,
    ) -> NoReturn:
        """THE mapping of asyncpg/network failures to rxmesh errors, most specific first.

        ``stage`` is where it happened: ``connect`` (opening a connection), ``acquire`` (waiting
        for a pool connection, which may include connecting) or ``query`` (on a connection).
        """
        where = f"store '{self._name}'"
        if isinstance(exc, StoreError | pgexc.PostgresError):
            # PostgresError already carries its sqlstate (CDNE 08003, 57P01, 53300, 42P01, ...).
            raise exc
        if isinstance(exc, pgexc.InterfaceError):
            cdne = isinstance(exc.__context__, pgexc.ConnectionDoesNotExistError)
            closed = connection is not None and _is_closed(connection)
            if cdne or closed:
                detail = (
                    "the connection died during the call; the statement MAY have run"
                    if cdne
                    else "the connection was already closed; the statement was never sent"
                )
                raise StoreError(
                    f"{where} lost its connection while {operation}: {detail}",
                    sqlstate="08006",
                    store=self._name,
                    transient=True,
                    may_have_run=cdne,
                ) from exc
            raise exc  # API misuse or a closing pool: a defect, surfaced unchanged
        if isinstance(exc, pgexc.InternalClientError) and stage != "connect":
            # A pooled connection whose backend was just terminated is handed out while asyncpg is
            # still consuming the FATAL: the call is refused before anything is sent. The
            # connection is unusable; drop it so the retry gets a fresh one.
            if connection is not None and not _is_closed(connection):
                connection.terminate()
            raise StoreError(
                f"{where} lost its connection while {operation}: the connection was in a broken "
                "protocol state (its backend had just gone); the statement was never sent",
                sqlstate="08006",
                store=self._name,
                transient=True,
                may_have_run=False,
            ) from exc
        if isinstance(exc, TimeoutError):
            if stage == "acquire" and self._in_use >= self._max_size:
                raise StorePoolExhaustedError(
                    f"this process's connection pool for {where} had no free connection within "
                    f"{self._acquire_timeout:g}s ({self._in_use}/{self._max_size} in use) while "
                    f"{operation}; the database was not reached",
                    sqlstate=None,
                    store=self._name,
                    transient=True,
                    may_have_run=False,
                ) from exc
            if stage in ("connect", "acquire"):
                raise StoreError(
                    f"{where} unreachable while {operation}: no connection within "
                    f"{self._connect_timeout:g}s",
                    sqlstate="08001",
                    store=self._name,
                    transient=True,
                    may_have_run=False,
                ) from exc
            if connection_usable:
                slow = StoreError(
                    f"{where} did not finish {operation} within {self._command_timeout:g}s "
                    "(the query was cancelled; the connection stayed usable)",
                    sqlstate="57014",
                    store=self._name,
                )
                slow.add_note(f"asyncpg raised {exc!r} after command_timeout")
                # Not chained: the store answered, slowly; a TimeoutError cause would make the
                # one rule read it as "unreachable".
                raise slow from None
            raise StoreError(
                f"{where} stopped answering while {operation}: no reply within "
                f"{self._command_timeout:g}s and the connection was dropped",
                sqlstate=None,
                store=self._name,
                transient=True,
                may_have_run=None,
            ) from exc
        if isinstance(exc, OSError):
            if stage in ("connect", "acquire"):
                raise StoreError(
                    f"{where} unreachable while {operation}: {exc}",
                    sqlstate="08001",
                    store=self._name,
                    transient=True,
                    may_have_run=False,
                ) from exc
            raise StoreError(
                f"{where} lost its connection while {operation}: {exc}",
                sqlstate="08006",
                store=self._name,
                transient=True,
                may_have_run=None,
            ) from exc
        raise exc

    async def _usable_after_timeout(self, conn: _Connection) -> bool:
        """After a query timeout: is the connection still answering? If not, terminate it."""
        if _is_closed(conn):
            return False
        try:
            async with asyncio.timeout(min(1.0, self._command_timeout)):
                await conn.fetchval("SELECT 1")
        except (TimeoutError, *_DRIVER_FAULTS):
            if not _is_closed(conn):
                conn.terminate()
            return False
        return True

    async def _run(
        self, operation: str, work: Callable[[_Connection], Awaitable[T]]
    ) -> T:
        """Run ``work`` on a pooled connection; every failure crosses the boundary once."""
        pool = self._pool
        if pool is None:
            raise RuntimeError(f"PostgresStore '{self._name}' is not started (await start())")
        try:
            conn = await pool.acquire(timeout=self._acquire_timeout)
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation=operation, stage="acquire")
        self._in_use += 1
        try:
            try:
                return await work(conn)
            except TimeoutError as exc:
                usable = await self._usable_after_timeout(conn)
                self._raise_at_boundary(
                    exc, operation=operation, stage="query", connection=conn,
                    connection_usable=usable,
                )
            except _DRIVER_FAULTS as exc:
                self._raise_at_boundary(exc, operation=operation, stage="query", connection=conn)
        finally:
            self._in_use -= 1
            await self._release(pool, conn, operation)

    async def _release(
        self, pool: asyncpg.Pool, conn: PoolConnectionProxy[Any], operation: str
    ) -> None:
        """Give ``conn`` back. A connection that cannot be reset (its backend died after the
        work ended) is discarded by asyncpg itself; that must not replace the work's own result
        or error, so it is reported here, not raised."""
        try:
            await pool.release(conn)
        except _DRIVER_FAULTS as exc:
            if not _is_closed(conn):
                conn.terminate()
            logger.bind(store=self._name, error_type=type(exc).__name__).warning(
                "store '{}': a connection could not be returned to the pool after {} ({}: {}); "
                "it was discarded",
                self._name,
                operation,
                type(exc).__name__,
                exc,
            )

    # ------------------------------------------------------------------ schema

    def _table(self, partition: str) -> str:
        return quote_identifier(self.schema_of(partition)) + ".nodes"

    async def _ensure_schema(self, conn: _Connection, partition: str) -> None:
        schema = self.schema_of(partition)
        s = quote_identifier(schema)
        channel = self._channel.replace("'", "''")
        # Serialise concurrent creators (CREATE SCHEMA IF NOT EXISTS alone can race) with a
        # SESSION lock taken BEFORE the transaction: a transaction-scoped lock taken inside it
        # leaves the transaction's catalog snapshot stale (an advisory lock processes no catalog
        # invalidations), so a waiter could still miss the schema its predecessor just committed
        # and fail with 23505 on pg_namespace. A new transaction starts with a fresh catalog view.
        await conn.execute("SELECT pg_advisory_lock(hashtext($1))", schema)
        try:
            await self._create_schema(conn, s, channel)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", schema)
        self._ensured.add(partition)

    async def _create_schema(self, conn: _Connection, s: str, channel: str) -> None:
        async with conn.transaction():
            await conn.execute(
                f"""
                CREATE SCHEMA IF NOT EXISTS {s};
                CREATE TABLE IF NOT EXISTS {s}.nodes (
                    path text PRIMARY KEY,
                    node_type text,
                    content jsonb,
                    created_by text,
                    created_at timestamptz,
                    version bigint NOT NULL DEFAULT 0,
                    request_id text
                );
                CREATE OR REPLACE FUNCTION {s}.rxmesh_notify() RETURNS trigger
                LANGUAGE plpgsql AS $fn$
                DECLARE
                    payload text;
                BEGIN
                    -- One NOTIFY per ~6 kB of changed rows: [schema, op, [[path, version], ...]]
                    -- (paths are <= 512 ASCII bytes, so a payload stays under the 8000 limit).
                    IF TG_OP = 'DELETE' THEN
                        FOR payload IN
                            SELECT json_build_array(TG_TABLE_SCHEMA, 'delete',
                                json_agg(json_build_array(path, version)))::text
                            FROM (SELECT path, version, sum(octet_length(path) + 24)
                                      OVER (ROWS UNBOUNDED PRECEDING) / 6000 AS g
                                  FROM old_rows) AS c
                            GROUP BY g
                        LOOP
                            PERFORM pg_notify('{channel}', payload);
                        END LOOP;
                    ELSE
                        FOR payload IN
                            SELECT json_build_array(TG_TABLE_SCHEMA, 'upsert',
                                json_agg(json_build_array(path, version)))::text
                            FROM (SELECT path, version, sum(octet_length(path) + 24)
                                      OVER (ROWS UNBOUNDED PRECEDING) / 6000 AS g
                                  FROM new_rows) AS c
                            GROUP BY g
                        LOOP
                            PERFORM pg_notify('{channel}', payload);
                        END LOOP;
                    END IF;
                    RETURN NULL;
                END
                $fn$;
                CREATE OR REPLACE TRIGGER rxmesh_notify_insert AFTER INSERT ON {s}.nodes
                    REFERENCING NEW TABLE AS new_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                CREATE OR REPLACE TRIGGER rxmesh_notify_update AFTER UPDATE ON {s}.nodes
                    REFERENCING NEW TABLE AS new_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                CREATE OR REPLACE TRIGGER rxmesh_notify_delete AFTER DELETE ON {s}.nodes
                    REFERENCING OLD TABLE AS old_rows
                    FOR EACH STATEMENT EXECUTE FUNCTION {s}.rxmesh_notify();
                """
            )

    async def _with_schema(
        self,
        conn: _Connection,
        partition: str,
        work: Callable[[], Awaitable[T]],
    ) -> T:
        """Run a write that needs ``partition``'s table, creating it lazily (once, race-safe)."""
        if partition not in self._ensured:
            await self._ensure_schema(conn, partition)
        try:
            return await work()
        except _MISSING_SCHEMA:
            # Dropped behind our back since we created it: create again, try once more.
            self._ensured.discard(partition)
            await self._ensure_schema(conn, partition)
            return await work()

    async def _partitions(self, conn: _Connection) -> list[str]:
        rows = await conn.fetch(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname",
            self._prefix,
        )
        return [row["nspname"][len(self._prefix) :] for row in rows]

    # ------------------------------------------------------------------ reads

    def read(self, path: str) -> Observable[MeshNode | None]:
        """The node at ``path``; ``None`` for a clean absence (also: no such partition)."""
        return from_async(lambda: self._read(path))

    async def _read(self, path: str) -> MeshNode | None:
        validate_path(path)
        table = self._table(partition_of(path))

        async def work(conn: _Connection) -> MeshNode | None:
            try:
                row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", path)
            except _MISSING_SCHEMA:
                return None  # the partition does not exist yet: a clean absence
            return None if row is None else _node_from_row(row)

        return await self._run(f"reading '{path}'", work)

    def read_many(self, paths: Sequence[str]) -> Observable[dict[str, MeshNode]]:
        """The nodes present among ``paths``, one query per partition."""
        return from_async(lambda: self._read_many(list(paths)))

    async def _read_many(self, paths: list[str]) -> dict[str, MeshNode]:
        by_partition: dict[str, list[str]] = {}
        for path in paths:
            validate_path(path)
            by_partition.setdefault(partition_of(path), []).append(path)
        if not by_partition:
            return {}

        async def work(conn: _Connection) -> dict[str, MeshNode]:
            found: dict[str, MeshNode] = {}
            for partition, wanted in by_partition.items():
                try:
                    rows = await conn.fetch(
                        f"SELECT {_COLUMNS} FROM {self._table(partition)} "
                        "WHERE path = ANY($1::text[])",
                        wanted,
                    )
                except _MISSING_SCHEMA:
                    continue
                for row in rows:
                    node = _node_from_row(row)
                    found[node.path] = node
            return found

        return await self._run(f"reading {len(paths)} path(s)", work)

    # ------------------------------------------------------------------ writes

    def write(self, node: MeshNode) -> Observable[MeshNode]:
        """Insert ``node`` (version ``max(1, node.version)``) if its path is free.

        A row already there with the same request id is an ambiguous commit that landed: it is
        emitted as if written now. Another request's row is a StoreConflictError.
        """
        return from_async(lambda: self._write(node))

    async def _write(self, node: MeshNode) -> MeshNode:
        validate_path(node.path)
        partition = node.partition
        table = self._table(partition)

        async def insert(conn: _Connection) -> asyncpg.Record | None:
            return await conn.fetchrow(
                f"INSERT INTO {table} (path, node_type, content, created_by, created_at, version,"
                " request_id) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7)"
                f" ON CONFLICT (path) DO NOTHING RETURNING {_COLUMNS}",
                node.path,
                node.node_type,
                _content_text(node),
                node.created_by,
                node.created_at,
                max(1, node.version),
                node.request_id,
            )

        async def work(conn: _Connection) -> MeshNode:
            row = await self._with_schema(conn, partition, lambda: insert(conn))
            if row is not None:
                return _node_from_row(row)
            existing = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", node.path
            )
            if existing is None:  # deleted between the two statements: try once more
                row = await insert(conn)
                if row is not None:
                    return _node_from_row(row)
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

        return await self._run(f"writing '{node.path}'", work)

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = DEFAULT_WRITE_WINDOW
    ) -> Observable[WindowCommitted]:
        """Insert in windows of at most ``window`` rows per partition, one transaction each.

        Each window is ONE ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING`` statement
        (never ``executemany``: cancelling a streaming executemany hangs asyncpg).
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

        async def work(conn: _Connection) -> None:
            # One pooled connection for the whole batch; every window is its own transaction
            # (one statement), committed and reported before the next one starts.
            for partition, members in by_partition.items():
                table = self._table(partition)
                for index, start in enumerate(range(0, len(members), window)):
                    chunk = members[start : start + window]
                    rows = await self._with_schema(
                        conn, partition, functools.partial(self._insert_window, conn, table, chunk)
                    )
                    landed = {row["path"] for row in rows}
                    emit(
                        WindowCommitted(
                            partition=partition,
                            index=index,
                            paths=tuple(n.path for n in chunk if n.path in landed),
                        )
                    )

        await self._run(f"writing {len(nodes)} node(s) in windows of {window}", work)

    async def _insert_window(
        self, conn: _Connection, table: str, chunk: list[MeshNode]
    ) -> list[asyncpg.Record]:
        sql = (
            f"INSERT INTO {table} (path, node_type, content, created_by, created_at, version,"
            " request_id) SELECT p, t, c::jsonb, b, a, v, r FROM unnest($1::text[], $2::text[],"
            " $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::text[])"
            " AS u(p, t, c, b, a, v, r) ON CONFLICT (path) DO NOTHING RETURNING path"
        )
        try:
            return await conn.fetch(
                sql,
                [n.path for n in chunk],
                [n.node_type for n in chunk],
                [_content_text(n) for n in chunk],
                [n.created_by for n in chunk],
                [n.created_at for n in chunk],
                [max(1, n.version) for n in chunk],
                [n.request_id for n in chunk],
                timeout=self._command_timeout,
            )
        except asyncio.CancelledError:
            if not _is_closed(conn):
                conn.terminate()  # never reuse a connection whose bulk call was cancelled
            raise

    def update(self, node: MeshNode) -> Observable[MeshNode | None]:
        """Replace type and content of an existing node, version + 1; ``None`` if absent."""
        return from_async(lambda: self._update(node))

    async def _update(self, node: MeshNode) -> MeshNode | None:
        validate_path(node.path)
        table = self._table(node.partition)

        async def work(conn: _Connection) -> MeshNode | None:
            try:
                row = await conn.fetchrow(
                    f"UPDATE {table} SET node_type = $2, content = $3::jsonb,"
                    f" version = version + 1 WHERE path = $1 RETURNING {_COLUMNS}",
                    node.path,
                    node.node_type,
                    _content_text(node),
                )
            except _MISSING_SCHEMA:
                return None
            return None if row is None else _node_from_row(row)

        return await self._run(f"updating '{node.path}'", work)

    def delete(self, path: str) -> Observable[bool]:
        """Delete the node at ``path`` (not its children); ``False`` if absent."""
        return from_async(lambda: self._delete(path))

    async def _delete(self, path: str) -> bool:
        validate_path(path)
        table = self._table(partition_of(path))

        async def work(conn: _Connection) -> bool:
            try:
                row = await conn.fetchrow(
                    f"DELETE FROM {table} WHERE path = $1 RETURNING path", path
                )
            except _MISSING_SCHEMA:
                return False
            return row is not None

        return await self._run(f"deleting '{path}'", work)

    def move(self, source: str, target: str) -> Observable[MeshNode | None]:
        """Move a node to a free path in one transaction; ``None`` if ``source`` is absent."""
        return from_async(lambda: self._move(source, target))

    async def _move(self, source: str, target: str) -> MeshNode | None:
        validate_path(source)
        validate_path(target)
        source_table = self._table(partition_of(source))
        target_partition = partition_of(target)
        target_table = self._table(target_partition)

        async def work(conn: _Connection) -> MeshNode | None:
            if target_partition not in self._ensured:
                await self._ensure_schema(conn, target_partition)
            async with conn.transaction():
                try:
                    row = await conn.fetchrow(
                        f"DELETE FROM {source_table} WHERE path = $1 RETURNING {_COLUMNS}", source
                    )
                except _MISSING_SCHEMA:
                    return None
                if row is None:
                    return None
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
                    row["request_id"],
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
            return await self._run(f"moving '{source}' to '{target}'", work)
        except _MISSING_SCHEMA:
            self._ensured.discard(target_partition)
            raise

    # ------------------------------------------------------------------ queries

    async def _select(self, query: NodeQuery) -> list[MeshNode]:
        prefix = query.path_prefix.rstrip("/")
        wanted: list[str] | None = None
        if query.partition is not None:
            wanted = [query.partition]
        if prefix:
            head = partition_of(prefix)
            if wanted is not None and head not in wanted:
                return []
            wanted = [head]
        for partition in wanted or ():
            validate_path(partition, allow_reserved=False)

        async def work(conn: _Connection) -> list[MeshNode]:
            partitions = wanted if wanted is not None else await self._partitions(conn)
            found: list[MeshNode] = []
            for partition in partitions:
                try:
                    rows = await conn.fetch(
                        f"SELECT {_COLUMNS} FROM {self._table(partition)}"
                        " WHERE ($1 = '' OR path = $1 OR starts_with(path, $1 || '/'))"
                        " AND ($2::text IS NULL OR node_type = $2) ORDER BY path",
                        prefix,
                        query.node_type,
                    )
                except _MISSING_SCHEMA:
                    continue
                found.extend(_node_from_row(row) for row in rows)
            return found

        return await self._run(f"querying {query!r}", work)

    def query(self, query: NodeQuery) -> Observable[QueryFrame]:
        """One Initial frame, then a Delta per matching committed change.

        After a declared change-feed gap the query re-runs and emits the difference as one Delta
        (nothing if nothing changed). Changes that arrive while a (re-)query runs are applied
        after it, de-duplicated by value.
        """

        def subscribe(
            observer: abc.ObserverBase[QueryFrame], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            events: asyncio.Queue[NodeChange | ChangeFeedGap | None] = asyncio.Queue()
            subscriptions = CompositeDisposable(
                self._changes.subject.subscribe(
                    events.put_nowait, on_completed=lambda: events.put_nowait(None)
                ),
                self._gaps.subject.subscribe(events.put_nowait),
            )

            async def run() -> None:
                nodes = await self._select(query)
                known = {node.path: node for node in nodes}
                observer.on_next(QueryFrame.initial(nodes, provider=self._name))
                while (event := await events.get()) is not None:
                    if isinstance(event, ChangeFeedGap):
                        frame = self._diff(known, await self._select(query))
                    else:
                        frame = self._apply(known, query, event)
                    if frame is not None:
                        observer.on_next(frame)
                observer.on_completed()

            worker = from_async(run).subscribe(on_error=observer.on_error, scheduler=scheduler)

            return CompositeDisposable(worker, subscriptions)

        return Observable(subscribe)

    def _apply(
        self, known: dict[str, MeshNode], query: NodeQuery, change: NodeChange
    ) -> QueryFrame | None:
        node = change.node
        if change.op == "delete" or (node is not None and not query.matches(node)):
            if known.pop(change.path, None) is not None:
                return QueryFrame.delta(removed=[change.path], provider=self._name)
            return None
        if node is None or known.get(node.path) == node:
            return None
        known[node.path] = node
        return QueryFrame.delta([node], provider=self._name)

    def _diff(self, known: dict[str, MeshNode], fresh: list[MeshNode]) -> QueryFrame | None:
        now = {node.path: node for node in fresh}
        changed = [node for path, node in now.items() if known.get(path) != node]
        removed = sorted(path for path in known if path not in now)
        known.clear()
        known.update(now)
        if not changed and not removed:
            return None
        return QueryFrame.delta(changed, removed, provider=self._name)

    # ------------------------------------------------------------------ the change feed

    @property
    def changes(self) -> Observable[NodeChange]:
        """Committed changes (every NOTIFY, with the row fetched for upserts)."""
        return self._changes.subject

    @property
    def gaps(self) -> Observable[ChangeFeedGap]:
        """Declared gaps: the listener was lost, re-connected and re-LISTENed."""
        return self._gaps.subject

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """Gaps declared and commits announced (one per NOTIFY)."""
        return self._answers.subject

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        self._notifications.put_nowait(cast(str, payload))

    def _on_terminated(self, conn: object) -> None:
        if conn is self._listen_conn:
            self._lost.set()

    async def _open_listener(self) -> None:
        try:
            conn = await asyncpg.connect(
                self._dsn,
                timeout=self._connect_timeout,
                command_timeout=self._command_timeout,
                server_settings={"application_name": "rxmesh-feed"},
            )
        except _DRIVER_FAULTS as exc:
            self._raise_at_boundary(exc, operation="opening the change feed", stage="connect")
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except _DRIVER_FAULTS as exc:
            conn.terminate()
            self._raise_at_boundary(
                exc, operation="listening to the change feed", stage="query", connection=conn
            )
        conn.add_termination_listener(self._on_terminated)
        self._lost.clear()
        self._listen_conn = conn

    async def _watch_feed(self) -> None:
        """Heartbeat the listener; on loss re-connect with backoff, re-LISTEN, declare a gap."""
        while not self._closing:
            reason = await self._heartbeat_until_lost()
            lost_at = _now()
            conn, self._listen_conn = self._listen_conn, None
            if conn is not None and not conn.is_closed():
                conn.terminate()
            logger.bind(store=self._name, reason=reason).error(
                "store '{}' change feed lost: {}; re-connecting", self._name, reason
            )
            attempt = 0
            while True:
                await asyncio.sleep(self._backoff[min(attempt, len(self._backoff) - 1)])
                attempt += 1
                try:
                    await self._open_listener()
                except (StoreError, *_DRIVER_FAULTS) as exc:
                    logger.bind(store=self._name, attempt=attempt).error(
                        "store '{}' unreachable while re-opening the change feed: {!r}",
                        self._name,
                        exc,
                    )
                    continue
                break
            gap = ChangeFeedGap(
                source=self._name, lost_at=lost_at, resumed_at=_now(), reason=reason
            )
            logger.bind(store=self._name).warning(
                "store '{}' change feed resumed after {:.3f}s; declaring a gap",
                self._name,
                (gap.resumed_at - gap.lost_at).total_seconds(),
            )
            self._gaps.subject.on_next(gap)
            self._answers.subject.on_next(gap)

    async def _heartbeat_until_lost(self) -> str:
        """Probe the listener connection until it is lost; return why."""
        while True:
            try:
                async with asyncio.timeout(self._heartbeat_interval):
                    await self._lost.wait()
                return "the listener connection was closed (terminated, restarted or reset)"
            except TimeoutError:
                pass
            conn = self._listen_conn
            if conn is None or conn.is_closed():
                return "the listener connection was closed"
            async with self._listen_lock:
                try:
                    async with asyncio.timeout(self._heartbeat_timeout):
                        await conn.fetchval("SELECT 1")
                except TimeoutError:
                    conn.terminate()  # a stall gives no other signal; close() would wait on it
                    return f"the heartbeat got no answer within {self._heartbeat_timeout:g}s"
                except _DRIVER_FAULTS as exc:
                    conn.terminate()
                    return f"the heartbeat failed: {exc!r}"

    async def _dispatch(self) -> None:
        """Turn queued NOTIFYs into NodeChange and CommitAnnounced, fetching rows in batches."""
        while True:
            payloads = [await self._notifications.get()]
            while not self._notifications.empty() and len(payloads) < 100:
                payloads.append(self._notifications.get_nowait())
            deliver = self._changes.observed  # live queries subscribe to it too
            announce = self._answers.observed
            if not (deliver or announce):
                continue
            batch = [
                (schema, path, op, int(version))
                for schema, op, rows in map(json.loads, payloads)
                for path, version in rows
            ]
            rows = await self._fetch_changed(batch) if deliver else {}
            changes, answers = self._changes.subject, self._answers.subject
            for schema, path, op, version in batch:
                if deliver:
                    changes.on_next(
                        NodeChange(
                            source=self._name,
                            op="delete" if op == "delete" else "upsert",
                            path=path,
                            version=version,
                            node=rows.get((schema, path)),
                        )
                    )
                if announce:
                    answers.on_next(CommitAnnounced(source=self._name, path=path, version=version))

    async def _fetch_changed(
        self, batch: list[tuple[str, str, str, int]]
    ) -> dict[tuple[str, str], MeshNode]:
        wanted: dict[str, list[str]] = {}
        for schema, path, op, _ in batch:
            if op != "delete":
                wanted.setdefault(schema, []).append(path)
        found: dict[tuple[str, str], MeshNode] = {}
        conn = self._listen_conn
        if not wanted or conn is None:
            return found
        async with self._listen_lock:
            try:
                for schema, paths in wanted.items():
                    try:
                        table = f"{quote_identifier(schema)}.nodes"
                        records = (
                            await conn.fetch(
                                f"SELECT {_COLUMNS} FROM {table} WHERE path = $1", paths[0]
                            )
                            if len(paths) == 1
                            else await conn.fetch(
                                f"SELECT {_COLUMNS} FROM {table} WHERE path = ANY($1::text[])",
                                paths,
                            )
                        )
                    except _MISSING_SCHEMA:
                        continue
                    for record in records:
                        found[(schema, record["path"])] = _node_from_row(record)
            except (TimeoutError, *_DRIVER_FAULTS) as exc:
                # The feed connection failed: treat it as a loss, so a gap is declared once it
                # is back and dependents re-read what these changes carried.
                logger.bind(store=self._name).error(
                    "store '{}' change feed could not fetch changed rows: {!r}", self._name, exc
                )
                conn.terminate()
        return found
