"""Cut/restore backends: a store wired so that an outage can be switched on and off on demand.

An :class:`OutageBackend` is what an outage drill (``rxmesh drill``) or a test of your own needs to
cut a store off and bring it back, and to read afterwards what really landed, behind every fault:

- :class:`InMemoryOutage`: the embedded store, ``FaultInjectingStore(InMemoryStore())``; the cut
  refuses every read and write as unreachable and drops the change feed; the restore declares a
  gap.
- :class:`PostgresProxyOutage`: a PostgreSQL server behind a loopback :class:`FaultProxy` it starts
  (and closes); the cut makes the proxy refuse new connections and reset every open one; the
  restore listens again and the store re-connects by itself. It never stops the server; it writes
  into its own schemas (a fresh prefix) and drops them on the way out.
- :class:`ServerStopOutage`: PostgreSQL on a throwaway :class:`TemporaryPostgresCluster`; the cut
  stops the server itself, the restore starts it again on its port.

Both wrap the store in a :class:`FaultInjectingStore` (``faults``), so a caller can also sever the
open live queries with a connection reset (:func:`~rxmesh.testing.connection_reset_error`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from rxmesh.aio import first_value
from rxmesh.model import MeshNode, NodeQuery, QueryFrame
from rxmesh.providers import Store
from rxmesh.testing._cluster import StopMode, TemporaryPostgresCluster
from rxmesh.testing._fault_store import FaultInjectingStore
from rxmesh.testing._proxy import FaultProxy

if TYPE_CHECKING:
    from rxmesh.providers.postgres import PostgresStore

__all__ = ["InMemoryOutage", "OutageBackend", "PostgresProxyOutage", "ServerStopOutage"]


class OutageBackend(Protocol):
    """A store that can be cut off and restored on demand.

    Attributes:
        store: the store to use (through the fault injection).
        faults: the :class:`FaultInjectingStore` in front of it.
        schema: the database schema of the partition, if the store has one.
        description: a sentence naming the store.
        cut_text: a sentence saying what :meth:`cut` does.
        restore_text: a sentence saying what :meth:`restore` does.
    """

    store: Store
    faults: FaultInjectingStore
    schema: str | None
    description: str
    cut_text: str
    restore_text: str

    async def __aenter__(self) -> OutageBackend:
        """Bring the store up (use the backend as ``async with``)."""

    async def __aexit__(self, *exc_info: object) -> None:
        """Close what the backend started and remove what it wrote."""

    async def cut(self) -> None:
        """Make the store unreachable."""

    async def restore(self) -> None:
        """Make the store answer again (and let it give its evidence)."""

    async def rows(self) -> list[MeshNode]:
        """Every row of the partition, read behind every fault (what really landed)."""


class InMemoryOutage:
    """The embedded store, ``FaultInjectingStore(InMemoryStore())``, cut and restored by its knobs.

    Args:
        partition: the partition :meth:`rows` reads.
        gap_reason: the reason of the gap :meth:`restore` declares.

    Example:
        >>> import asyncio
        >>> backend = InMemoryOutage("p")
        >>> asyncio.run(backend.cut())
        >>> backend.faults.statistics().feed_mode
        'drop'
    """

    def __init__(self, partition: str, *, gap_reason: str = "the store answers again") -> None:
        from rxmesh.providers.memory import InMemoryStore

        self.partition = partition
        self.gap_reason = gap_reason
        self.inner = InMemoryStore()
        self.faults = FaultInjectingStore(self.inner)
        self.store: Store = self.faults
        self.description = "embedded in-memory store: FaultInjectingStore(InMemoryStore())"
        self.cut_text = (
            "FaultInjectingStore refuses every read and write as unreachable "
            "(StoreError 08001 from ConnectionRefusedError), drops the change feed and severs the "
            "open live queries with the incident chain (StoreError <- ConnectionResetError 104)"
        )
        self.restore_text = "FaultInjectingStore answers again; its change feed resumes"
        self.schema: str | None = None
        self.cut_at = datetime.now(UTC)

    async def __aenter__(self) -> InMemoryOutage:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def cut(self) -> None:
        """Refuse every read and write as unreachable and drop the change feed."""
        self.cut_at = datetime.now(UTC)
        self.faults.refuse_writes_as_unreachable()
        self.faults.refuse_reads_as_unreachable()
        self.faults.drop_change_feed()

    async def restore(self) -> None:
        """Answer again, resume the feed, and declare the gap since the cut (the evidence)."""
        self.faults.restore()
        self.faults.resume_change_feed(announce_gap=False)
        self.faults.declare_gap(self.gap_reason, lost_at=self.cut_at)

    async def rows(self) -> list[MeshNode]:
        """The partition's rows, read from the inner store."""
        query = NodeQuery(partition=self.partition)
        frame: QueryFrame = await first_value(self.inner.query(query), timeout=10.0)
        return list(frame.nodes)


class PostgresProxyOutage:
    """PostgreSQL behind a loopback :class:`FaultProxy` it starts (and closes); its own schemas.

    Use it as an async context manager: entering starts the proxies and the store, leaving closes
    them and drops the partition's schema. Behind a transaction-pooling proxy (PgBouncer, RDS Proxy,
    Supavisor) give ``listen_dsn``, a direct connection to the server for the change feed: a second
    proxy stands in front of it and is cut too. The server itself is never stopped.

    Args:
        dsn: the server (or pooler) to reach through the proxy.
        listen_dsn: the change feed's direct connection, behind a pooler.
        partition: the partition whose schema :meth:`rows` reads and the exit drops.
        schema_prefix: the store's schema prefix (default: a fresh ``outage<hex>_``).
        label: what the store's name and the description call the proxy.
    """

    def __init__(
        self,
        dsn: str,
        listen_dsn: str | None = None,
        *,
        partition: str,
        schema_prefix: str | None = None,
        label: str = "outage proxy",
    ) -> None:
        self.dsn = dsn
        self.listen_dsn = listen_dsn
        self.partition = partition
        self.label = label
        # The backend's own statements (schema drop, final read) go to the server directly when
        # it can, and never rely on asyncpg's named statements (a pooler breaks them).
        self.admin_dsn = listen_dsn or dsn
        self.prefix = schema_prefix or f"outage{secrets.token_hex(4)}_"
        self.description = ""
        self.cut_text = (
            "the FaultProxy refuses new connections and resets (TCP RST) every open one: "
            "the pool and the change-feed listener lose the server; the open live queries are "
            "severed with the incident chain (injected through FaultInjectingStore: a PostgreSQL "
            "live query itself would wait for the gap and re-read rather than fail)"
        )
        self.restore_text = "the FaultProxy listens again; the store re-connects by itself"

    async def __aenter__(self) -> PostgresProxyOutage:
        from urllib.parse import urlparse

        parsed = urlparse(self.dsn)
        self.proxy = await FaultProxy(parsed.hostname or "127.0.0.1", parsed.port or 5432).start()
        self.listen_proxy: FaultProxy | None = None
        listen_dsn = None
        if self.listen_dsn is not None:
            heard = urlparse(self.listen_dsn)
            self.listen_proxy = await FaultProxy(
                heard.hostname or "127.0.0.1", heard.port or 5432
            ).start()
            listen_dsn = self.listen_proxy.dsn(self.listen_dsn)
        self.pg = _tuned_store(
            self.proxy.dsn(self.dsn),
            name=f"postgres@{parsed.hostname or '127.0.0.1'}:{parsed.port or 5432}"
            f"/{parsed.path.lstrip('/') or 'postgres'} (via {self.label} :{self.proxy.port})",
            listen_dsn=listen_dsn,
            prefix=self.prefix,
        )
        try:
            await self.pg.start()
        except BaseException:
            await self._close_proxies()
            raise
        self.faults = FaultInjectingStore(self.pg)
        self.store: Store = self.faults
        self.schema: str | None = self.pg.schema_of(self.partition)
        self.description = f"PostgreSQL {self.pg.name}; schemas {self.prefix}* (dropped at the end)"
        if self.pg.pooled:
            self.description += "; through a connection pooler"
        if self.listen_proxy is not None:
            self.description += f"; change feed via {self.label} :{self.listen_proxy.port}"
        return self

    def _proxies(self) -> list[FaultProxy]:
        return [self.proxy] + ([self.listen_proxy] if self.listen_proxy is not None else [])

    async def _close_proxies(self) -> None:
        for proxy in self._proxies():
            await proxy.close()

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.pg.close()
        finally:
            await self._close_proxies()
            await _drop_schema(self.admin_dsn, self.pg.schema_of(self.partition))

    async def cut(self) -> None:
        """Every proxy refuses new connections and resets (TCP RST) the open ones."""
        for proxy in self._proxies():
            proxy.refuse()
            proxy.reset()

    async def restore(self) -> None:
        """Every proxy listens again; the store re-connects and declares its own gap."""
        for proxy in self._proxies():
            await proxy.restore()

    async def rows(self) -> list[MeshNode]:
        """The partition's rows, read from the server directly (not through the proxy)."""
        return await _read_rows(self.admin_dsn, self.pg.schema_of(self.partition))


class ServerStopOutage:
    """PostgreSQL on a throwaway server, cut by stopping the server itself and restored by
    starting it again (on the same port).

    Use it as an async context manager: entering starts the store, leaving closes it (starting
    the server again first if it is still cut) and drops the partition's schema. The server is the
    caller's: it is left running.

    Args:
        cluster: a started :class:`~rxmesh.testing.TemporaryPostgresCluster`.
        partition: the partition whose schema :meth:`rows` reads and the exit drops.
        schema_prefix: the store's schema prefix (default: a fresh ``outage<hex>_``).
        stop_mode: ``"fast"`` (the server closes every connection) or ``"immediate"`` (a crash).
    """

    def __init__(
        self,
        cluster: TemporaryPostgresCluster,
        *,
        partition: str,
        schema_prefix: str | None = None,
        stop_mode: StopMode = "fast",
    ) -> None:
        self.cluster = cluster
        self.partition = partition
        self.prefix = schema_prefix or f"outage{secrets.token_hex(4)}_"
        self.stop_mode: StopMode = stop_mode
        self.stopped = False
        self.description = ""
        self.cut_text = (
            f"the server stops (pg_ctl stop -m {stop_mode}): it closes every connection and "
            "refuses new ones"
        )
        self.restore_text = "the server starts again on its port; the store re-connects by itself"

    async def __aenter__(self) -> ServerStopOutage:
        self.pg = _tuned_store(
            self.cluster.dsn,
            name=f"postgres@127.0.0.1:{self.cluster.port}/postgres (throwaway server)",
            listen_dsn=None,
            prefix=self.prefix,
        )
        await self.pg.start()
        self.faults = FaultInjectingStore(self.pg)
        self.store: Store = self.faults
        self.schema: str | None = self.pg.schema_of(self.partition)
        self.description = f"PostgreSQL {self.pg.name}; schemas {self.prefix}* (dropped at the end)"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.pg.close()
        finally:
            if self.stopped:
                await self.restore()
            await _drop_schema(self.cluster.dsn, self.pg.schema_of(self.partition))

    async def cut(self) -> None:
        """Stop the server (off the loop: ``pg_ctl`` blocks until it is down)."""
        self.stopped = True
        await asyncio.to_thread(self.cluster.stop, self.stop_mode)

    async def restore(self) -> None:
        """Start the server again; the store re-connects and declares its own gap."""
        await asyncio.to_thread(self.cluster.start)
        self.stopped = False

    async def rows(self) -> list[MeshNode]:
        """The partition's rows, read from the server (which must be running)."""
        return await _read_rows(self.cluster.dsn, self.pg.schema_of(self.partition))


def _tuned_store(dsn: str, *, name: str, listen_dsn: str | None, prefix: str) -> PostgresStore:
    """A PostgresStore tuned for outages of seconds: short timeouts, a fast heartbeat."""
    from rxmesh.providers.postgres import PostgresStore

    return PostgresStore(
        dsn,
        name=name,
        listen_dsn=listen_dsn,
        schema_prefix=prefix,
        connect_timeout=2.0,
        command_timeout=5.0,
        heartbeat_interval=0.2,
        heartbeat_timeout=0.5,
        reconnect_backoff=(0.05, 0.1, 0.2, 0.5),
        acquire_timeout=5.0,
    )


async def _drop_schema(admin_dsn: str, schema: str) -> None:
    """Drop ``schema`` over a connection of its own (no named statements: a pooler breaks them)."""
    import asyncpg

    conn = await asyncpg.connect(admin_dsn, timeout=5.0, statement_cache_size=0)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


async def _read_rows(admin_dsn: str, schema: str) -> list[MeshNode]:
    """Every row of ``schema``'s nodes, by path, over a connection of its own."""
    import asyncpg

    conn = await asyncpg.connect(admin_dsn, timeout=5.0, statement_cache_size=0)
    try:
        records = await conn.fetch(
            "SELECT path, node_type, content::text AS content, request_id FROM "
            f'"{schema}".nodes ORDER BY path'
        )
    finally:
        await conn.close()
    return [
        MeshNode(
            path=r["path"],
            node_type=r["node_type"],
            content=None if r["content"] is None else json.loads(r["content"]),
            request_id=r["request_id"],
        )
        for r in records
    ]
