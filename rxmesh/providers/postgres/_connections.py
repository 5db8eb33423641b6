"""The store's connections: the pool and what each store call does with it (take a
connection, run, map a failure once, give it back), the dedicated connections (the change
feed's listener, the pooler detection), and the options every one of them is opened with.

Nothing here keeps session state across transactions, so it works behind a transaction-pooling
proxy: the pool's reset on release sends nothing, and statements are unnamed when a pooler is
detected (asyncpg's ``statement_cache_size=0``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qs, urlparse

import asyncpg
import asyncpg.exceptions as pgexc
from asyncpg.pool import PoolConnectionProxy
from loguru import logger

from rxmesh.exceptions import StoreError
from rxmesh.providers.postgres._attempts import SharedAttempts
from rxmesh.providers.postgres._errors import (
    DRIVER_FAULTS,
    Boundary,
    Stage,
    marks_unreachable,
    store_error,
    to_store_error,
)

__all__ = ["TARGET_SESSION_ATTRS", "Connection", "Connections", "dsn_name", "is_closed"]

T = TypeVar("T")

TARGET_SESSION_ATTRS: frozenset[str] = frozenset(
    {"any", "primary", "standby", "prefer-standby", "read-write", "read-only"}
)
"""The values asyncpg (like libpq) accepts for ``target_session_attrs``."""
_ASYNCPG_STATEMENT_CACHE_SIZE = 100
"""asyncpg's own default, kept for direct connections."""
Connection = asyncpg.Connection | PoolConnectionProxy


def dsn_name(dsn: str) -> str:
    """``postgres@host:port/db`` (every host of a multi-host DSN, comma-separated); never the
    password."""
    parsed = urlparse(dsn)
    hosts = parsed.netloc.rpartition("@")[2]
    if "," in hosts:
        shown = ",".join(h if ":" in h.lstrip("[") else f"{h}:5432" for h in hosts.split(","))
    else:
        shown = f"{parsed.hostname or 'localhost'}:{parsed.port or 5432}"
    database = parsed.path.lstrip("/") or parsed.username or "postgres"
    return f"postgres@{shown}/{database}"


def _settings(dsn: str, application_name: str) -> dict[str, str]:
    """The connections' server settings: the DSN's own ``application_name`` wins (an operator
    names the service's connections), else ``application_name``."""
    given = parse_qs(urlparse(dsn).query).get("application_name")
    return {"application_name": given[-1] if given else application_name}


def _session_attrs(given: str | None, dsn: str) -> str | None:
    """What asyncpg is told to connect to: the caller's choice, else the DSN's or the
    environment's (``None`` lets asyncpg read them), else ``"read-write"``.

    The store writes through every connection it opens, so by default a server that cannot
    take writes (a standby, or ``default_transaction_read_only``) is refused when connecting,
    before anything is pooled: otherwise reads would keep answering from a standby after the
    address leads back to the primary. asyncpg decides it from what the server reports at
    login, so a PostgreSQL 14+ costs no round trip.
    """
    if given is not None:
        return given
    if "target_session_attrs" in parse_qs(urlparse(dsn).query) or os.environ.get(
        "PGTARGETSESSIONATTRS"
    ):
        return None
    return "read-write"


def is_closed(conn: Connection) -> bool:
    """Whether ``conn`` is closed; a pool proxy the pool already detached (because its
    connection closed while in use) counts as closed."""
    try:
        return conn.is_closed()
    except pgexc.InterfaceError:
        return True


async def _leave_no_session_state(conn: asyncpg.Connection) -> None:
    """The pool's reset on release: nothing to send.

    asyncpg's default sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;``
    on every release — one round trip per store call. rxmesh leaves no session state on a pooled
    connection (every advisory lock is transaction-scoped, it never SETs, LISTENs or keeps a
    cursor outside a transaction there; the change feed has its own connection), and asyncpg
    still rolls back an open transaction and drops listeners before calling this. Behind a
    transaction pooler the default reset was also harmful: it ran on whatever server connection
    the pooler lent, undoing another client's session state.
    """


class Connections:
    """The pool of one store and its dedicated connections; every driver failure of theirs
    crosses :meth:`raise_at_boundary` once."""

    def __init__(
        self,
        dsn: str,
        *,
        name: str,
        listen_dsn: str,
        min_size: int,
        max_size: int,
        command_timeout: float,
        connect_timeout: float,
        acquire_timeout: float,
        pooled: bool | None,
        target_session_attrs: str | None,
    ) -> None:
        self.dsn = dsn
        self.listen_dsn = listen_dsn
        self.listen_name = dsn_name(listen_dsn)
        self.name = name
        self.min_size = min_size
        self.max_size = max_size
        self.command_timeout = command_timeout
        self.connect_timeout = connect_timeout
        self.acquire_timeout = acquire_timeout
        self.pooled_option = pooled
        self.pooled: bool | None = pooled
        self.pooler_evidence: str | None = None if pooled is None else "given"
        self.target_session_attrs = _session_attrs(target_session_attrs, dsn)
        self.listen_session_attrs = _session_attrs(target_session_attrs, listen_dsn)
        self.pool: asyncpg.Pool | None = None
        self.in_use = 0
        self.attempts = SharedAttempts()

    @staticmethod
    def statement_cache_size(pooled: bool | None) -> int:
        return 0 if pooled else _ASYNCPG_STATEMENT_CACHE_SIZE

    def _options(self, *, pooled: bool | None, listener: bool = False) -> dict[str, Any]:
        """asyncpg options every connection of this store gets (pool, listener, detection)."""
        options: dict[str, Any] = {
            "command_timeout": self.command_timeout,
            "statement_cache_size": self.statement_cache_size(pooled),
        }
        attrs = self.listen_session_attrs if listener else self.target_session_attrs
        if attrs is not None:
            options["target_session_attrs"] = attrs
        return options

    # ------------------------------------------------------------------ the pool

    async def open_pool(self) -> asyncpg.Pool:
        """Open the pool (mapped at the boundary when the store cannot be reached)."""
        try:
            pool = await asyncpg.create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                timeout=self.connect_timeout,
                server_settings=_settings(self.dsn, "rxmesh"),
                reset=_leave_no_session_state,
                **self._options(pooled=self.pooled),
            )
        except DRIVER_FAULTS as exc:
            self.raise_at_boundary(exc, operation="opening the pool", stage="connect")
        self.pool = pool
        return pool

    def detach(self) -> asyncpg.Pool | None:
        """Forget the pool (the caller closes it): no store call takes a connection any more."""
        pool, self.pool = self.pool, None
        return pool

    async def close_pool(self, pool: asyncpg.Pool) -> None:
        try:
            async with asyncio.timeout(self.command_timeout):
                await pool.close()
        except (TimeoutError, *DRIVER_FAULTS) as exc:
            logger.bind(store=self.name, error_type=type(exc).__name__).warning(
                "store '{}': the pool did not close cleanly ({!r}); terminating it",
                self.name,
                exc,
            )
            pool.terminate()

    def _started(self) -> asyncpg.Pool:
        pool = self.pool
        if pool is None:
            raise RuntimeError(f"PostgresStore '{self.name}' is not started (await start())")
        return pool

    async def run(self, operation: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection; every failure crosses the boundary once.

        While the store is unreachable one connection attempt is made at a time, and the
        operations that waited for it get its answer (:class:`SharedAttempts`)."""
        pool = self._started()
        conn = await self.attempts.attempt(
            functools.partial(self._acquire, pool, operation, self.acquire_timeout),
            unreachable=marks_unreachable,
            answer=functools.partial(self._answer_shared, operation),
        )
        return await self._use(pool, conn, operation, work)

    async def notify(self, channel: str, payload: str, budget: tuple[float, str]) -> None:
        """``pg_notify`` through the pool, all of it within ``budget`` (seconds, and the name of
        the option that set them): the change feed's delivery probe.

        No shared attempt: the probe is the feed's own evidence of whether the pool answers. A
        probe that times out must not wait for a stalled connection to be reset on release, so
        its connection is terminated (the pool replaces it).
        """
        pool = self._started()
        operation = "sending a change-feed probe"
        deadline = time.perf_counter() + budget[0]
        conn = await self._acquire(pool, operation, budget[0])

        async def send(conn: Connection) -> None:
            left = max(deadline - time.perf_counter(), 0.001)
            await conn.execute("SELECT pg_notify($1, $2)", channel, payload, timeout=left)

        await self._use(pool, conn, operation, send, time_box=budget)

    async def _acquire(
        self, pool: asyncpg.Pool, operation: str, timeout: float
    ) -> PoolConnectionProxy[Any]:
        """A pooled connection for ``operation``; a failure crosses the boundary once."""
        try:
            return await pool.acquire(timeout=timeout)
        except DRIVER_FAULTS as exc:
            self.raise_at_boundary(exc, operation=operation, stage="acquire", wait=timeout)

    async def _use(
        self,
        pool: asyncpg.Pool,
        conn: PoolConnectionProxy[Any],
        operation: str,
        work: Callable[[Connection], Awaitable[T]],
        *,
        time_box: tuple[float, str] | None = None,
    ) -> T:
        """``work`` on ``conn``, then ``conn`` back to the pool. ``time_box``: the call's own
        bound (seconds, and its name); when it fires, or the call is cancelled, the connection
        is terminated at once instead of checked."""
        self.in_use += 1
        try:
            try:
                return await work(conn)
            except TimeoutError as exc:
                if time_box is None:
                    usable = await self._usable_after_timeout(conn)
                else:
                    conn.terminate()
                    usable = False
                self.raise_at_boundary(
                    exc,
                    operation=operation,
                    stage="query",
                    connection=conn,
                    connection_usable=usable,
                    time_box=time_box,
                )
            except pgexc.ReadOnlySQLTransactionError as exc:
                standby = await self.in_recovery(conn)
                self.raise_at_boundary(
                    exc, operation=operation, stage="query", connection=conn, in_recovery=standby
                )
            except DRIVER_FAULTS as exc:
                self.raise_at_boundary(exc, operation=operation, stage="query", connection=conn)
            except BaseException:
                if time_box is not None:
                    conn.terminate()  # cancelled mid-call (close()): never hand it back half-done
                raise
        finally:
            self.in_use -= 1
            await self._release(pool, conn, operation)

    async def _release(
        self, pool: asyncpg.Pool, conn: PoolConnectionProxy[Any], operation: str
    ) -> None:
        """Give ``conn`` back. A connection that cannot be reset (its backend died after the
        work ended) is discarded by asyncpg itself; that must not replace the work's own result
        or error, so it is reported here, not raised."""
        try:
            await pool.release(conn)
        except DRIVER_FAULTS as exc:
            if not is_closed(conn):
                conn.terminate()
            logger.bind(store=self.name, error_type=type(exc).__name__).warning(
                "store '{}': a connection could not be returned to the pool after {} ({}: {}); "
                "it was discarded",
                self.name,
                operation,
                type(exc).__name__,
                exc,
            )

    def _answer_shared(self, operation: str, failure: BaseException) -> NoReturn:
        """Raise ``operation``'s own error for a concurrent operation's connection attempt that
        found the store unreachable (:class:`SharedAttempts`): the error its own attempt would
        have raised, built from the same driver fault."""
        note = (
            "no connection attempt of its own: the store was already unreachable, and a "
            "concurrent operation's attempt, in flight when this one began, failed so"
        )
        cause = failure.__cause__
        own: BaseException | None = None
        if (
            isinstance(failure, StoreError)
            and isinstance(cause, DRIVER_FAULTS)
            and not isinstance(cause, StoreError)
        ):
            own = self._mapped(cause, operation=operation, stage="acquire")
        if own is None or own is cause or not marks_unreachable(own):
            own = store_error(
                self.name,
                f"store '{self.name}' unreachable while {operation}: {failure}",
                sqlstate=getattr(failure, "sqlstate", None) or "08001",
                may_have_run=False,
            )
            own.__cause__ = failure
        own.add_note(note)
        try:
            raise own
        finally:  # this frame is in the error's traceback: hold none of them (no cycle)
            del own, failure, cause

    # ------------------------------------------------------------------ dedicated connections

    async def connect(
        self, *, operation: str, listener: bool = False, pooled: bool | None = True
    ) -> asyncpg.Connection:
        """A connection of its own (the listener's, or the pooler detection's), opened with the
        store's options; a failure crosses the boundary once."""
        dsn = self.listen_dsn if listener else self.dsn
        try:
            return await asyncpg.connect(
                dsn,
                timeout=self.connect_timeout,
                server_settings=_settings(dsn, "rxmesh-feed" if listener else "rxmesh"),
                **self._options(pooled=pooled, listener=listener),
            )
        except DRIVER_FAULTS as exc:
            self.raise_at_boundary(exc, operation=operation, stage="connect")

    async def _usable_after_timeout(self, conn: Connection) -> bool:
        """After a query timeout: is the connection still answering? If not, terminate it."""
        if is_closed(conn):
            return False
        try:
            async with asyncio.timeout(min(1.0, self.command_timeout)):
                await conn.fetchval("SELECT 1")
        except (TimeoutError, *DRIVER_FAULTS):
            if not is_closed(conn):
                conn.terminate()
            return False
        return True

    async def in_recovery(self, conn: Connection) -> bool | None:
        """After a 25006: does the server say it is a standby? ``None`` if it cannot say."""
        if is_closed(conn):
            return None
        try:
            async with asyncio.timeout(min(1.0, self.command_timeout)):
                answer = await conn.fetchval("SELECT pg_is_in_recovery()")
        except (TimeoutError, *DRIVER_FAULTS):
            return None
        return bool(answer)

    # ------------------------------------------------------------------ the boundary

    def _mapped(
        self,
        exc: BaseException,
        *,
        operation: str,
        stage: Stage,
        connection: Connection | None = None,
        connection_usable: bool | None = None,
        in_recovery: bool | None = None,
        wait: float | None = None,
        time_box: tuple[float, str] | None = None,
    ) -> BaseException:
        """The error :meth:`raise_at_boundary` raises for ``exc`` (``exc`` itself when it passes
        through); a connection the mapping says is unusable is terminated."""
        closed = connection is not None and is_closed(connection)
        mapped = to_store_error(
            exc,
            Boundary(
                store=self.name,
                operation=operation,
                stage=stage,
                target_session_attrs=self.target_session_attrs,
                in_recovery=in_recovery,
                connection_closed=closed,
                connection_usable=connection_usable,
                in_use=self.in_use,
                max_size=self.max_size,
                acquire_timeout=self.acquire_timeout if wait is None else wait,
                connect_timeout=self.connect_timeout,
                command_timeout=self.command_timeout if time_box is None else time_box[0],
                time_box="command_timeout" if time_box is None else time_box[1],
            ),
        )
        if mapped.drop_connection and connection is not None and not closed:
            connection.terminate()
        if mapped.error is not exc:
            mapped.error.__cause__ = exc
        return mapped.error

    def raise_at_boundary(
        self,
        exc: BaseException,
        *,
        operation: str,
        stage: Stage,
        connection: Connection | None = None,
        connection_usable: bool | None = None,
        in_recovery: bool | None = None,
        wait: float | None = None,
        time_box: tuple[float, str] | None = None,
    ) -> NoReturn:
        """Raise the rxmesh error for ``exc`` (:func:`~._errors.to_store_error`), ``from exc``.

        ``stage``: where it happened; ``in_recovery``: for a 25006, whether the server said it
        is a standby; ``wait`` and ``time_box``: the bounds of this call when they are not the
        store's ``acquire_timeout`` and ``command_timeout``.
        """
        error = self._mapped(
            exc,
            operation=operation,
            stage=stage,
            connection=connection,
            connection_usable=connection_usable,
            in_recovery=in_recovery,
            wait=wait,
            time_box=time_box,
        )
        if error is exc:
            raise exc
        raise error from exc
