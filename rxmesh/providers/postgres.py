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
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, NoReturn, TypeVar
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
from rxmesh.providers._feed import (
    BATCH_SIZE,
    DEFAULT_MALFORMED_LOG_INTERVAL,
    ChangeFeedState,
    ChangeFeedStatistics,
    Entry,
    FeedBook,
    MalformedNotificationError,
    Role,
    parse_notification,
)
from rxmesh.providers._store import DEFAULT_WRITE_WINDOW

__all__ = [
    "DEFAULT_MALFORMED_LOG_INTERVAL",
    "DEFAULT_RECONNECT_BACKOFF",
    "DEFAULT_SCHEMA_PREFIX",
    "ChangeFeedState",
    "ChangeFeedStatistics",
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
        malformed_log_interval: seconds between two WARNING lines about change-feed payloads
            that do not parse (each is counted and skipped; see :meth:`feed_statistics`).
        clock: monotonic seconds for that rate limit; injectable for tests.

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
        malformed_log_interval: float = DEFAULT_MALFORMED_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
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
        self._notifications: asyncio.Queue[object] = asyncio.Queue()
        self._tasks: dict[Role, asyncio.Task[None]] = {}
        self._feed = FeedBook(self._name, self._channel, malformed_log_interval, clock)

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
        self._feed.state = ChangeFeedState.LISTENING
        self._spawn("dispatch", self._dispatch())
        self._spawn("listener", self._watch_feed())

    async def close(self) -> None:
        """Stop the change feed, close the pool, and complete the hot streams.

        It always closes everything, whatever state the feed's tasks ended in: their errors are
        logged at ERROR (once), never raised from here. Idempotent. If the task calling
        ``close()`` is cancelled meanwhile, the connections are still terminated and the
        cancellation propagates.
        """
        self._closing = True
        self._feed.state = ChangeFeedState.CLOSED
        tasks = list(self._tasks.items())
        self._tasks.clear()
        pool, self._pool = self._pool, None
        try:
            for _, task in tasks:
                task.cancel()
            self._drop_listener()
            if tasks:
                # asyncio.wait never raises a task's error; a stuck task cannot hold close().
                _, stuck = await asyncio.wait(
                    [task for _, task in tasks], timeout=self._command_timeout
                )
                for role, task in tasks:
                    self._report_at_close(role, task, stuck=task in stuck)
            if pool is not None:
                await self._close_pool(pool)
        finally:
            self._drop_listener()
            if pool is not None and not pool.is_closing():
                pool.terminate()  # close() itself was cancelled before the pool's turn
            self._feed.report_held(force=True)
            for hot in (self._changes, self._gaps, self._answers):
                hot.subject.on_completed()

    def _report_at_close(self, role: str, task: asyncio.Task[None], *, stuck: bool) -> None:
        """Log what a feed task ended with, unless it was reported already (a task that died
        while the store was open was reported, and replaced, when it died)."""
        log = logger.bind(store=self._name, task=role)
        if stuck:
            log.error(
                "store '{}' change feed {} task did not stop within {:g}s of close(); "
                "its connection was terminated",
                self._name,
                role,
                self._command_timeout,
            )
        elif not task.cancelled() and (error := task.exception()) is not None:
            log.bind(error_type=type(error).__name__).opt(exception=error).error(
                "store '{}' change feed {} task had died: {}: {}",
                self._name,
                role,
                type(error).__name__,
                error,
            )

    async def _close_pool(self, pool: asyncpg.Pool) -> None:
        try:
            async with asyncio.timeout(self._command_timeout):
                await pool.close()
        except (TimeoutError, *_DRIVER_FAULTS) as exc:
            logger.bind(store=self._name, error_type=type(exc).__name__).warning(
                "store '{}': the pool did not close cleanly ({!r}); terminating it",
                self._name,
                exc,
            )
            pool.terminate()

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
            # A time-box rxmesh itself set (command_timeout, a per-call timeout) fired: the
            # store did not answer in time. That is the seeds' connect-timeout shape -- a DB frame
            # around the TimeoutError, which the one rule calls unreachable -- whether the server
            # was slow or THIS process stalled (the box is wall-clock and runs on while the loop
            # is blocked). Only a server-sent 57014 (statement_timeout, a cancel from another
            # session) is a refused query; it is a PostgresError and passed through above.
            state = (
                "the query was cancelled and the connection stayed usable"
                if connection_usable
                else "the connection was dropped"
            )
            raise StoreError(
                f"{where} did not answer in time while {operation}: no reply within "
                f"{self._command_timeout:g}s (the time box rxmesh set, command_timeout; {state})",
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

    def feed_statistics(self) -> ChangeFeedStatistics:
        """The change feed's state and counters, as a frozen snapshot.

        ``rxmesh.health.ChangeFeedCheck(store)`` turns it into a health entry.
        """
        return self._feed.snapshot()

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """asyncpg's listener callback: count and queue the payload; parsing happens later,
        one payload at a time, so nothing a NOTIFY carries can fail here."""
        self._feed.notifications += 1
        self._notifications.put_nowait(payload)

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
        except BaseException:
            conn.terminate()  # cancelled (close()) between connect and LISTEN: never leak it
            raise
        conn.add_termination_listener(self._on_terminated)
        self._lost.clear()
        self._listen_conn = conn

    def _drop_listener(self) -> None:
        """Forget the LISTEN connection and terminate it (never ``close()``: it may be stalled)."""
        conn, self._listen_conn = self._listen_conn, None
        if conn is not None and not _is_closed(conn):
            conn.terminate()

    # -- who keeps the feed alive: every feed task is watched; one that ends while the store is
    # open means the feed is LOST (logged, shown by health), restarted, and a gap declared.

    def _spawn(self, role: Role, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"{self._name} change feed {role}")
        self._tasks[role] = task
        task.add_done_callback(functools.partial(self._on_feed_task_done, role))

    def _on_feed_task_done(self, role: Role, task: asyncio.Task[None]) -> None:
        """A feed task ended. While the store is open that is a loss: report it and recover."""
        if self._closing or self._tasks.get(role) is not task:
            return  # close() stopped it, and reports what it has not seen reported
        error = None if task.cancelled() else task.exception()
        if task.cancelled():
            reason = f"its {role} task was cancelled from outside the store"
        elif error is None:
            reason = f"its {role} task ended unexpectedly"
        else:
            reason = f"its {role} task died: {type(error).__name__}: {error}"
        self._feed.lost(_now(), reason)
        log = logger.bind(store=self._name, task=role, reason=reason).opt(exception=error)
        if task.cancelled():
            # Someone else's decision (often a loop shutting down): do not fight it, say it.
            del self._tasks[role]
            self._feed.stopped = True
            log.error(
                "store '{}' change feed lost: {}; it stays down until the store is closed",
                self._name,
                reason,
            )
            return
        delay_index = self._feed.consecutive_restarts
        self._feed.consecutive_restarts += 1
        self._feed.restarts += 1
        log.error("store '{}' change feed lost: {}; restarting it", self._name, reason)
        if role == "dispatch":
            delay = self._backoff[min(delay_index, len(self._backoff) - 1)]
            self._spawn("dispatch", self._dispatch(restart_after=delay))
        else:
            self._drop_listener()
            self._spawn("listener", self._watch_feed(reconnect_from=delay_index))

    def _feed_is_whole(self) -> bool:
        conn = self._listen_conn
        return (
            conn is not None
            and not _is_closed(conn)
            and all(
                (task := self._tasks.get(role)) is not None and not task.done()
                for role in ("dispatch", "listener")
            )
        )

    def _resume_if_recovered(self) -> None:
        """Declare the gap of the current loss once the feed is whole again (listening AND
        dispatching), never while the store is still away."""
        loss = self._feed.loss
        if loss is None or self._closing or not self._feed_is_whole():
            return
        lost_at, reason = loss
        gap = ChangeFeedGap(source=self._name, lost_at=lost_at, resumed_at=_now(), reason=reason)
        self._feed.resumed()
        logger.bind(store=self._name, reason=reason).warning(
            "store '{}' change feed resumed after {:.3f}s; declaring a gap",
            self._name,
            (gap.resumed_at - gap.lost_at).total_seconds(),
        )
        self._publish(self._gaps, gap, "gaps")
        self._publish(self._answers, gap, "answers_again")

    def _publish(self, hot: _Hot, value: object, stream: str) -> None:
        """``on_next`` to each subscriber on its own: one subscriber that raises is reported
        (ERROR, rate-limited) and the others, live queries included, still get the value."""
        subject = hot.subject
        if subject.is_disposed or subject.is_stopped:
            return
        with subject.lock:
            observers = subject.observers.copy()
        for observer in observers:
            try:
                observer.on_next(value)
            except Exception as exc:  # noqa: BLE001 - reported; the other subscribers go on
                self._feed.subscriber_error(stream, exc)

    # -- the listener

    async def _watch_feed(self, *, reconnect_from: int | None = None) -> None:
        """Heartbeat the listener; on loss re-connect with backoff, re-LISTEN, declare a gap.

        ``reconnect_from``: this task replaces one that died (the loss is recorded already), so
        it re-connects first, starting at that step of the backoff.
        """
        while not self._closing:
            if reconnect_from is None:
                reason = await self._heartbeat_until_lost()
                self._feed.lost(_now(), reason)
                self._drop_listener()
                logger.bind(store=self._name, reason=reason).error(
                    "store '{}' change feed lost: {}; re-connecting", self._name, reason
                )
            await self._reconnect_listener(reconnect_from or 0)
            reconnect_from = None
            self._resume_if_recovered()

    async def _reconnect_listener(self, attempt: int) -> None:
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
            return

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

    # -- the dispatcher

    async def _dispatch(self, *, restart_after: float | None = None) -> None:
        """Turn queued NOTIFYs into NodeChange and CommitAnnounced, batch by batch.

        It does not die of a batch: a payload that does not parse is counted, logged (WARNING,
        rate-limited) and skipped; any other failure of a batch is logged at ERROR and declared
        as a gap (its changes may not have been delivered), and the next batch goes on.
        ``restart_after``: this task replaces one that died; wait that long, then declare the
        gap of that loss.
        """
        if restart_after is not None:
            await asyncio.sleep(restart_after)
            self._resume_if_recovered()
        while True:
            payloads = await self._next_batch()
            try:
                await self._dispatch_batch(payloads)
            except Exception as exc:  # noqa: BLE001 - reported at ERROR and declared as a gap
                self._batch_failed(exc, len(payloads))
            else:
                self._feed.consecutive_restarts = 0
            self._feed.report_held()

    async def _next_batch(self) -> list[object]:
        payloads = [await self._notifications.get()]
        while not self._notifications.empty() and len(payloads) < BATCH_SIZE:
            payloads.append(self._notifications.get_nowait())
        return payloads

    async def _dispatch_batch(self, payloads: list[object]) -> None:
        batch: list[Entry] = []
        for payload in payloads:  # each on its own: one bad payload cannot spoil the batch
            try:
                batch.extend(parse_notification(payload, self._prefix))
            except MalformedNotificationError as bad:
                self._feed.malformed(payload, str(bad))
        deliver = self._changes.observed  # live queries subscribe to it too
        announce = self._answers.observed
        if not batch or not (deliver or announce):
            return
        rows = await self._fetch_changed(batch) if deliver else {}
        for schema, path, op, version in batch:
            if deliver:
                change = NodeChange(
                    source=self._name,
                    op="delete" if op == "delete" else "upsert",
                    path=path,
                    version=version,
                    node=rows.get((schema, path)),
                )
                self._publish(self._changes, change, "changes")
            if announce:
                announced = CommitAnnounced(source=self._name, path=path, version=version)
                self._publish(self._answers, announced, "answers_again")

    def _batch_failed(self, exc: Exception, size: int) -> None:
        self._feed.failed_batches += 1
        reason = (
            f"a batch of {size} notification(s) could not be delivered: "
            f"{type(exc).__name__}: {exc}"
        )
        logger.bind(store=self._name, error_type=type(exc).__name__).opt(exception=exc).error(
            "store '{}' change feed: {}; declaring a gap so dependents re-read", self._name, reason
        )
        self._feed.lost(_now(), reason)
        self._resume_if_recovered()

    async def _fetch_changed(self, batch: list[Entry]) -> dict[tuple[str, str], MeshNode]:
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
