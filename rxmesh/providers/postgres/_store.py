"""The facade: :class:`PostgresStore`'s options, start and close, and statistics; the verbs
come from its reads, writes, pages and live queries, the change feed is an object of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType

import asyncpg
from reactivex import Observable

from rxmesh.model import ChangeFeedGap, NodeChange, NodeQuery, StoreEvidence
from rxmesh.providers.postgres._book import (
    DEFAULT_MALFORMED_LOG_INTERVAL,
    ChangeFeedStatistics,
)
from rxmesh.providers.postgres._connections import TARGET_SESSION_ATTRS, Connections, dsn_name
from rxmesh.providers.postgres._feed import ChangeFeed
from rxmesh.providers.postgres._groups import WriteGroups
from rxmesh.providers.postgres._live import LiveQueries, _Reread
from rxmesh.providers.postgres._pages import Pages
from rxmesh.providers.postgres._pooler import detect_pooler
from rxmesh.providers.postgres._schema import (
    DEFAULT_SCHEMA_PREFIX,
    DEFAULT_TOMBSTONE_RETENTION,
    Schemas,
    schema_for_partition,
)
from rxmesh.providers.postgres._writes import _WRITE_LANES, Writes, _path_of, _size_of

__all__ = [
    "DEFAULT_FEED_LOSS_BOUND",
    "DEFAULT_RECONNECT_BACKOFF",
    "PostgresStore",
    "PostgresStoreStatistics",
]

DEFAULT_RECONNECT_BACKOFF: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0)
"""Delays (s) between re-connect attempts of the change-feed listener; the last one repeats."""

DEFAULT_FEED_LOSS_BOUND = 30.0
"""Seconds the change feed may stay lost before every live query of the store ends with a
transient :class:`~rxmesh.exceptions.StoreError`: its view is no longer maintained."""


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class PostgresStoreStatistics:
    """A snapshot of a :class:`PostgresStore` (``store.statistics()``).

    Attributes:
        store: the store's name.
        pooled: whether the pool's DSN goes through a connection pooler (detected at
            ``start()`` when ``pooled=None``; ``None`` before that).
        pooler_evidence: how that was decided (the backend key against the server's pid, or
            "given").
        statement_cache_size: asyncpg's statement cache on the pool's connections (0 when
            pooled: unnamed statements only).
        listen_target: the printable name of the LISTEN connection's DSN.
        target_session_attrs: what the pool's connections are opened with: as given, else
            ``"read-write"``; ``None`` when the DSN or ``PGTARGETSESSIONATTRS`` names one.
        pool_size: connections the pool holds now.
        pool_idle: of those, idle.
        connections_in_use: acquired by rxmesh now.
        feed: the change feed's statistics.
        write_groups: statements that carried creates waiting behind busy lanes (see
            ``group_creates``); 0 when grouping is off.
        grouped_creates: the creates those statements carried.
        shared_connect_failures: operations answered by a concurrent operation's failed
            connection attempt instead of making their own, while the store was unreachable
            (one attempt at a time then; see docs/providers.md).
    """

    store: str
    pooled: bool | None
    pooler_evidence: str | None
    statement_cache_size: int
    listen_target: str
    target_session_attrs: str | None
    pool_size: int
    pool_idle: int
    connections_in_use: int
    feed: ChangeFeedStatistics
    write_groups: int = 0
    grouped_creates: int = 0
    shared_connect_failures: int = 0


class PostgresStore(LiveQueries, Writes, Pages):
    """A :class:`~rxmesh.providers.Store` on PostgreSQL through asyncpg.

    Args:
        dsn: a libpq-style URL (``postgresql://user@host:port/db``).
        name: the printable name; default ``"postgres@host:port/db"`` (never a password).
        min_size: pool minimum size.
        max_size: pool maximum size.
        command_timeout: seconds, set on every connection (a stall then ends).
        connect_timeout: seconds for one connection attempt.
        heartbeat_interval: seconds between two delivery probes of the change feed: a NOTIFY
            sent through the pool that must arrive on the LISTEN connection.
        heartbeat_timeout: seconds a probe may take, from sending to arrival; past it the feed
            is lost (re-connected, re-LISTENed, verified, then a gap is declared). ``start()``
            waits that long for the first probe and refuses if it never arrives.
        reconnect_backoff: delays between listener re-connect attempts; the last repeats.
        acquire_timeout: seconds to wait for a pool connection (then
            :class:`~rxmesh.exceptions.StorePoolExhaustedError` if the pool was full).
        schema_prefix: prefix of partition schemas (``[a-z][a-z0-9_]{0,14}``); the NOTIFY
            channel is ``<prefix>changes``. Two stores with different prefixes share nothing.
        malformed_log_interval: seconds between two WARNING lines about change-feed payloads
            that do not parse (each is counted and skipped; see :meth:`feed_statistics`).
        clock: monotonic seconds for that rate limit; injectable for tests.
        listen_dsn: where the dedicated LISTEN connection goes (default: ``dsn``). Behind a
            transaction-pooling proxy, ``dsn`` names the proxy and ``listen_dsn`` the primary
            directly (a pooler hands a LISTEN session's server connection to other clients).
        pooled: whether ``dsn`` goes through a connection pooler. ``None`` (the default)
            detects it at ``start()``: one connection asks ``pg_backend_pid()`` and compares it
            with the backend key the connection got (a pooler sends its own key, PostgreSQL
            its pid). ``True``: unnamed statements only (asyncpg's ``statement_cache_size=0``),
            which a transaction pooler cannot break. ``False``: asyncpg's statement cache, no
            detection.
        target_session_attrs: passed to asyncpg for the pool and the listener (one of
            :data:`TARGET_SESSION_ATTRS`); with a multi-host DSN, ``"read-write"`` (or
            ``"primary"``) connects only to the primary, so a standby listed first is skipped.
            Unset (and not in the DSN or ``PGTARGETSESSIONATTRS``): ``"read-write"``, so no
            connection to a standby is ever pooled; ``"any"`` lets reads answer from one.
        group_creates: concurrent creates of one partition that wait behind its busy lanes go
            as one statement (docs/providers.md); ``False``: every create is its own statement
            and transaction, as many in flight as the pool allows.
        feed_loss_bound: seconds the change feed may stay lost (not re-connected, re-LISTENed
            and verified) before every live query of this store ends with a transient
            :class:`~rxmesh.exceptions.StoreError` (08006) saying its view is no longer
            maintained; a live query opened while the loss lasts gets its Initial, then the
            same end. ``reopen_on_transient_fault`` re-opens it: a fresh read. Shorter losses
            end in a declared gap and a re-read instead (docs/live-queries.md).
        tombstone_retention: seconds a deleted path's tombstone is kept in its partition, so a
            resume token (``query(..., resume_from=token)``) can be told of the deletion; a
            token older than that is answered with an Initial marked ``reset``. It is stored in
            the partition when this store first writes there (the last store to do so sets it).

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
        listen_dsn: str | None = None,
        pooled: bool | None = None,
        target_session_attrs: str | None = None,
        group_creates: bool = True,
        feed_loss_bound: float = DEFAULT_FEED_LOSS_BOUND,
        tombstone_retention: float = DEFAULT_TOMBSTONE_RETENTION,
    ) -> None:
        if not reconnect_backoff:
            raise ValueError("reconnect_backoff must not be empty")
        if not 0 < feed_loss_bound < float("inf"):
            raise ValueError(f"feed_loss_bound must be a positive number, not {feed_loss_bound!r}")
        if target_session_attrs is not None and target_session_attrs not in TARGET_SESSION_ATTRS:
            raise ValueError(
                f"target_session_attrs {target_session_attrs!r} must be one of "
                f"{sorted(TARGET_SESSION_ATTRS)}"
            )
        self._schemas = Schemas(schema_prefix, tombstone_retention)
        self._name = name or dsn_name(dsn)
        self._connections = Connections(
            dsn,
            name=self._name,
            listen_dsn=listen_dsn or dsn,
            min_size=min_size,
            max_size=max_size,
            command_timeout=command_timeout,
            connect_timeout=connect_timeout,
            acquire_timeout=acquire_timeout,
            pooled=pooled,
            target_session_attrs=target_session_attrs,
        )
        self._feed = ChangeFeed(
            self._connections,
            channel=self._schemas.channel,
            prefix=schema_prefix,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            backoff=tuple(reconnect_backoff),
            loss_bound=feed_loss_bound,
            malformed_log_interval=malformed_log_interval,
            clock=clock,
        )
        self._groups = (
            WriteGroups(self._write_group, _path_of, lanes=_WRITE_LANES, size_of=_size_of)
            if group_creates
            else None
        )
        self._reselects: dict[NodeQuery, tuple[int, _Reread]] = {}

    # ------------------------------------------------------------------ lifecycle

    @property
    def name(self) -> str:
        """``postgres@host:port/db`` unless given."""
        return self._name

    @property
    def schema_prefix(self) -> str:
        """The prefix of this store's partition schemas."""
        return self._schemas.prefix

    @property
    def feed_backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection (``None`` while it is down)."""
        return self._feed.backend_pid

    def _dispatcher_checkpoint(self) -> str | None:
        """The snapshot the change feed waits to reach (for tests of the rule)."""
        return self._feed.checkpoint

    def schema_of(self, partition: str) -> str:
        """The unquoted schema name of ``partition`` in this store."""
        return schema_for_partition(partition, self._schemas.prefix)

    def _table(self, partition: str) -> str:
        """The quoted ``schema.nodes`` of ``partition``."""
        return self._schemas.table(partition)

    @property
    def _pool(self) -> asyncpg.Pool | None:
        """The pool while the store is started (for tests that reach a pooled connection)."""
        return self._connections.pool

    @property
    def pooled(self) -> bool | None:
        """Whether the pool's DSN goes through a connection pooler (given, or detected at
        :meth:`start`; ``None`` before a detecting start)."""
        return self._connections.pooled

    def statistics(self) -> PostgresStoreStatistics:
        """The store's set-up and pool, and its change feed's statistics, as a frozen snapshot."""
        connections = self._connections
        pool = connections.pool
        groups = self._groups
        return PostgresStoreStatistics(
            store=self._name,
            pooled=connections.pooled,
            pooler_evidence=connections.pooler_evidence,
            statement_cache_size=connections.statement_cache_size(connections.pooled),
            listen_target=connections.listen_name,
            target_session_attrs=connections.target_session_attrs,
            pool_size=0 if pool is None else pool.get_size(),
            pool_idle=0 if pool is None else pool.get_idle_size(),
            connections_in_use=connections.in_use,
            feed=self._feed.book.snapshot(),
            write_groups=0 if groups is None else groups.groups_sent,
            grouped_creates=0 if groups is None else groups.members_sent,
            shared_connect_failures=connections.attempts.shared,
        )

    async def start(self) -> None:
        """Open the pool and the dedicated LISTEN connection, and verify the change feed end to
        end: a probe NOTIFY sent through the pool must reach the listener within
        ``heartbeat_timeout`` (the first LISTEN declares no gap).

        With ``pooled=None`` it first detects whether ``dsn`` goes through a pooler.

        Raises:
            StoreError: the database could not be reached (mapped; see docs/providers.md).
            ChangeFeedUnverifiedError: the probe was sent but never arrived: notifications sent
                through the pool do not reach the LISTEN connection (a transaction-pooling
                proxy or a standby?); the message says how to fix it. Nothing stays open.
        """
        connections = self._connections
        if connections.pool is not None:
            return
        self._feed.reset()
        began = _now()
        if connections.pooled_option is None:
            connections.pooled, connections.pooler_evidence = await detect_pooler(connections)
        pool = await connections.open_pool()
        try:
            await self._feed.start(began)
        except BaseException:
            connections.detach()
            await connections.close_pool(pool)
            raise

    async def close(self) -> None:
        """Stop the change feed, close the pool, and complete the hot streams.

        It always closes everything, whatever state the feed's tasks ended in: their errors are
        logged at ERROR (once), never raised from here. Idempotent. If the task calling
        ``close()`` is cancelled meanwhile, the connections are still terminated and the
        cancellation propagates.
        """
        pool = self._connections.detach()
        reselects = [reread.task for _, reread in self._reselects.values() if reread.task]
        self._reselects.clear()
        try:
            for reselect in reselects:  # their subscribers are told by the completion below
                reselect.cancel()
            await self._feed.close()
            if pool is not None:
                await self._connections.close_pool(pool)
        finally:
            if pool is not None and not pool.is_closing():
                pool.terminate()  # close() itself was cancelled before the pool's turn
            self._feed.complete()

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

    # ------------------------------------------------------------------ the change feed

    @property
    def changes(self) -> Observable[NodeChange]:
        """Committed changes (every NOTIFY, with the row fetched for upserts)."""
        return self._feed.changes

    @property
    def gaps(self) -> Observable[ChangeFeedGap]:
        """Declared gaps: the listener was lost, re-connected and re-LISTENed."""
        return self._feed.gaps

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """Evidence that the store answers: gaps declared, commits announced (one per NOTIFY),
        and the verified start.

        Evidence counts only when the write path answers: while the pool does not (a probe
        could not be sent through it, or operations found the store unreachable through it)
        nothing is published, even if the listener, on its own route, hears other processes'
        commits; once a probe sent through the pool arrives again, one
        :class:`~rxmesh.model.ChangeFeedGap` on this stream (not on :attr:`gaps`: the changes
        themselves were delivered) says so, for what was held back and what was recorded
        meanwhile.

        The verified start (``start()`` connected, LISTENed, and a probe sent through the pool
        arrived) is a ``ChangeFeedGap`` on this stream too: published at ``start()``, and
        given at once to each later subscriber while the feed is listening and the pool
        answers, so intents loaded from a journal are re-issued on this process's own evidence,
        not on another process's next commit.
        """
        return self._feed.answers_again

    @property
    def feed_is_whole(self) -> bool:
        """Whether the change feed is listening now (what ``feed_statistics().state`` says,
        without building the snapshot: the mesh asks before trusting facts it kept), and no
        announced commit is held back from ``answers_again`` (its subscribers, the kept facts
        among them, have not seen it yet)."""
        return self._feed.is_whole

    def feed_statistics(self) -> ChangeFeedStatistics:
        """The change feed's state and counters, as a frozen snapshot.

        ``rxmesh.health.ChangeFeedCheck(store)`` turns it into a health entry.
        """
        return self._feed.statistics()
