"""The change feed's LISTEN connection: its own connection (never a pooled one: a pooler hands a
LISTEN session's server connection to other clients), the queue of what it hears, and the
answers to the delivery probes it is waiting for.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg.exceptions as pgexc

from rxmesh.providers.postgres._book import FeedBook
from rxmesh.providers.postgres._connections import Connection, Connections, is_closed
from rxmesh.providers.postgres._errors import DRIVER_FAULTS
from rxmesh.providers.postgres._notifications import (
    MalformedNotificationError,
    parse_probe,
    probe_marker,
)

__all__ = ["Listener"]


class Listener:
    """The LISTEN connection of one store (``conn``: ``None`` while it is down)."""

    def __init__(self, connections: Connections, channel: str, prefix: str, book: FeedBook) -> None:
        self._connections = connections
        self._channel = channel
        self._prefix = prefix
        self._book = book
        self._probe_marker = probe_marker(prefix)
        self.conn: Connection | None = None
        self.lock = asyncio.Lock()
        """Held by whoever sends a statement on the connection (a fetch, the heartbeat)."""
        self.lost = asyncio.Event()
        """Set when the connection was terminated (by the server, the network or rxmesh)."""
        self.notifications: asyncio.Queue[object] = asyncio.Queue()
        self.probe_waiters: dict[str, asyncio.Future[float]] = {}

    @property
    def backend_pid(self) -> int | None:
        conn = self.conn
        return None if conn is None or conn.is_closed() else conn.get_server_pid()

    @property
    def up(self) -> bool:
        return self.conn is not None and not is_closed(self.conn)

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """asyncpg's listener callback: count and queue the payload; parsing happens later,
        one payload at a time, so nothing a NOTIFY carries can fail here.

        A delivery probe (a payload that begins like one) is answered here, at once, so its
        round trip is not the dispatcher's queue; one that does not parse as a probe is queued
        like any other payload (and counted malformed there)."""
        if isinstance(payload, str) and payload.startswith(self._probe_marker):
            try:
                token = parse_probe(payload, self._prefix)
            except MalformedNotificationError:
                pass
            else:
                waiter = self.probe_waiters.pop(token, None)
                if waiter is None:
                    self._book.foreign_probes += 1  # another instance's (or a late one of ours)
                elif not waiter.done():
                    waiter.set_result(time.perf_counter())
                return
        self._book.notifications += 1
        self.notifications.put_nowait(payload)

    def _on_terminated(self, conn: object) -> None:
        if conn is self.conn:
            self.lost.set()

    async def open(self) -> None:
        """Connect and LISTEN; a failure crosses the boundary once (nothing is left open)."""
        connections = self._connections
        # The listener shares the pool's statement cache setting when it shares its DSN.
        pooled = connections.pooled if connections.listen_dsn == connections.dsn else False
        conn = await connections.connect(
            operation="opening the change feed", listener=True, pooled=pooled
        )
        operation = "listening to the change feed"
        try:
            await conn.add_listener(self._channel, self.on_notify)
        except pgexc.ReadOnlySQLTransactionError as exc:  # LISTEN on a standby
            standby = await connections.in_recovery(conn)
            conn.terminate()
            connections.raise_at_boundary(
                exc, operation=operation, stage="query", in_recovery=standby
            )
        except DRIVER_FAULTS as exc:
            conn.terminate()
            connections.raise_at_boundary(exc, operation=operation, stage="query", connection=conn)
        except BaseException:
            conn.terminate()  # cancelled (close()) between connect and LISTEN: never leak it
            raise
        conn.add_termination_listener(self._on_terminated)
        self.lost.clear()
        self.conn = conn

    def drop(self) -> None:
        """Forget the connection and terminate it (never ``close()``: it may be stalled)."""
        conn, self.conn = self.conn, None
        if conn is not None and not is_closed(conn):
            conn.terminate()

    async def answers(self, conn: Connection, unsent: str, timeout: float) -> str | None:
        """``SELECT 1`` on the listener connection: ``None`` if it answers, else why not."""
        async with self.lock:
            try:
                async with asyncio.timeout(timeout):
                    await conn.fetchval("SELECT 1")
            except TimeoutError:
                return f"{unsent}, and the heartbeat got no answer within {timeout:g}s"
            except DRIVER_FAULTS as exc:
                return f"{unsent}, and the heartbeat failed: {exc!r}"
        return None
