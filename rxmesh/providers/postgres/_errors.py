"""asyncpg's and the network's failures as rxmesh errors: the one mapping, most specific first.

:func:`to_store_error` is a pure function of the exception and a :class:`Boundary` (where it
happened and what the store knew then): it never touches a connection or a pool, so every row of
the table in docs/providers.md is tested without a server. It says whether the connection must
not be used again; terminating it is the caller's job (:meth:`Connections.raise_at_boundary
<rxmesh.providers.postgres._connections.Connections.raise_at_boundary>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import asyncpg.exceptions as pgexc

from rxmesh.exceptions import StoreError, StorePoolExhaustedError
from rxmesh.faults import exception_chain, is_transient_connect_fault

__all__ = [
    "DRIVER_FAULTS",
    "MISSING_SCHEMA",
    "NO_POSITIONS",
    "Boundary",
    "Mapped",
    "Stage",
    "marks_unreachable",
    "store_error",
    "to_store_error",
]

Stage = Literal["connect", "acquire", "query"]
"""Where a failure happened: opening a connection, waiting for a pool connection (which may
include connecting), or on a connection."""

MISSING_SCHEMA = (pgexc.UndefinedTableError, pgexc.InvalidSchemaNameError)
"""A partition whose schema or table does not exist (yet, or any more)."""
NO_POSITIONS = (pgexc.UndefinedTableError, pgexc.UndefinedColumnError, pgexc.UndefinedFunctionError)
"""A partition made before positions existed (no horizon, no ``changed_xid``) and not written
to since: a read of what changed since a position cannot be answered there."""
DRIVER_FAULTS = (OSError, pgexc.PostgresError, pgexc.InterfaceError, pgexc.InternalClientError)
"""What the driver or the network raises; each crosses :func:`to_store_error`."""

_POOLER_REFUSALS = (
    "server login has been failing",  # PgBouncer: its own logins to the server keep failing
    "query_wait_timeout",  # PgBouncer: the query waited for a server connection, none came
)
"""What a connection pooler says when it refuses a client before handing its statement to any
server: the statement never reached PostgreSQL, so nothing was written."""
_PREPARED_STATEMENT_LOST = (
    pgexc.InvalidSQLStatementNameError,  # 26000 prepared statement "..." does not exist
    pgexc.DuplicatePreparedStatementError,  # 42P05 prepared statement "..." already exists
)


@dataclass(frozen=True, slots=True)
class Boundary:
    """What the mapping needs to know besides the exception.

    Attributes:
        store: the store's name.
        operation: what the store was doing ("writing 'a/b'"), for the message.
        stage: see :data:`Stage`.
        target_session_attrs: what the connections are opened with (for a refusal naming it).
        in_recovery: for a 25006, whether the server said it is a standby (``None``: unknown).
        connection_closed: a connection was involved and is closed already.
        connection_usable: after a time-out on a connection, whether it still answered.
        in_use: connections the store holds now; max_size: the pool's maximum.
        acquire_timeout, connect_timeout, command_timeout: the time boxes, in seconds.
        time_box: the name of the query's time box, for the message (the probe has its own).
    """

    store: str
    operation: str
    stage: Stage
    target_session_attrs: str | None = None
    in_recovery: bool | None = None
    connection_closed: bool = False
    connection_usable: bool | None = None
    in_use: int = 0
    max_size: int = 10
    acquire_timeout: float = 10.0
    connect_timeout: float = 5.0
    command_timeout: float = 10.0
    time_box: str = "command_timeout"


class Mapped(NamedTuple):
    """The error to raise (``exc`` itself when it passes through unchanged, else raised ``from``
    it), and whether the connection it happened on must never be used again."""

    error: BaseException
    drop_connection: bool = False


def store_error(
    store: str,
    message: str,
    *,
    sqlstate: str | None,
    may_have_run: bool | None,
    kind: type[StoreError] = StoreError,
) -> StoreError:
    """A transient :class:`~rxmesh.exceptions.StoreError` of ``store``: every error this store
    makes of a fault is an availability failure, never a verdict on the request."""
    return kind(message, sqlstate=sqlstate, store=store, transient=True, may_have_run=may_have_run)


def _pooler_refusal(exc: BaseException) -> str | None:
    """The pooler's own refusal in ``exc``'s chain (see :data:`_POOLER_REFUSALS`), or ``None``."""
    for frame in exception_chain(exc):
        text = str(frame)
        if any(phrase in text for phrase in _POOLER_REFUSALS):
            return text
    return None


def marks_unreachable(error: BaseException) -> bool:
    """Whether taking a pooled connection failed because the store could not be reached (the
    one rule); a pool with every connection busy is no such evidence."""
    return is_transient_connect_fault(error) and not isinstance(error, StorePoolExhaustedError)


def to_store_error(exc: BaseException, at: Boundary) -> Mapped:
    """The rxmesh error for a driver or network failure ``exc`` met at ``at``."""
    where = f"store '{at.store}'"
    operation = at.operation

    def error(message: str, sqlstate: str | None, may_have_run: bool | None) -> StoreError:
        return store_error(at.store, message, sqlstate=sqlstate, may_have_run=may_have_run)

    if isinstance(exc, StoreError):
        return Mapped(exc)
    if isinstance(exc, pgexc.ReadOnlySQLTransactionError):
        # 25006 on a statement rxmesh sent: rxmesh never opens a read-only transaction, so the
        # server it reached cannot take writes: a standby (a failover in progress, or a DSN
        # naming a standby) or a primary put in read-only mode. The statement was refused before
        # it ran: an availability failure, and re-issuing it to the primary is meaningful.
        server = (
            "is a standby in recovery (pg_is_in_recovery() is true): a failover in "
            "progress, or the DSN names a standby"
            if at.in_recovery
            else "refuses writes (a standby, or default_transaction_read_only is on)"
        )
        # Never pooled again: a connection that reached a standby stays on it (the pool's idle
        # recycling does not replace it), so every later write through it would meet the same
        # refusal after the address leads back to the primary. The next acquire connects anew.
        return Mapped(
            error(
                f"{where} could not take the write while {operation}: the server it reached "
                f"{server}; nothing ran. Writes need the primary: point the DSN at it, or list "
                "every host and pass target_session_attrs='read-write'",
                "08000",
                False,
            ),
            drop_connection=True,
        )
    if isinstance(exc, _PREPARED_STATEMENT_LOST):
        # 26000 / 42P05 from asyncpg's own named statements (rxmesh names none): something
        # between rxmesh and the server moved the session (a transaction pooler, or a DISCARD
        # ALL run by a session pooler), so a statement prepared on one server connection is
        # missing (or clashes) on the next. The statement did not run; a fresh connection may
        # carry it, and this one's statement cache is wrong.
        return Mapped(
            error(
                f"{where} could not evaluate the statement while {operation}: asyncpg's "
                f"prepared statement was missing or clashed on the server connection "
                f"({exc.sqlstate}: {exc}); nothing ran. A connection pooler moves sessions "
                "between server connections: pass pooled=True (or leave pooled=None to detect "
                "it) so statements stay unnamed",
                "08000",
                False,
            ),
            drop_connection=True,
        )
    if isinstance(exc, pgexc.PostgresError | pgexc.InterfaceError) and (
        refusal := _pooler_refusal(exc)
    ):
        # asyncpg reports it as the connection closing mid-call (08003), which would leave the
        # outcome unknown; but the pooler said no server was reached.
        return Mapped(
            error(
                f"{where} unreachable while {operation}: the connection pooler refused before "
                f"any server was reached ({refusal}); nothing ran",
                "08001",
                False,
            ),
            drop_connection=True,
        )
    if isinstance(exc, pgexc.PostgresError):
        # It carries its sqlstate already (08003, 57P01, 53300, 42P01, ...).
        return Mapped(exc)
    if isinstance(exc, pgexc.TargetServerAttributeNotMatched):
        # No host of the DSN is what target_session_attrs asks for (say, no primary yet while a
        # standby is being promoted): the store could not be reached.
        return Mapped(
            error(
                f"{where} unreachable while {operation}: no host of the DSN matches "
                f"target_session_attrs={at.target_session_attrs!r} (a standby, a read-only "
                f"server, or a failover in progress?): {exc}",
                "08001",
                False,
            )
        )
    if isinstance(exc, pgexc.InterfaceError):
        cdne = isinstance(exc.__context__, pgexc.ConnectionDoesNotExistError)
        if cdne or at.connection_closed:
            detail = (
                "the connection died during the call; the statement may have run"
                if cdne
                else "the connection was already closed; the statement was never sent"
            )
            return Mapped(
                error(f"{where} lost its connection while {operation}: {detail}", "08006", cdne)
            )
        return Mapped(exc)  # API misuse or a closing pool: a defect, surfaced unchanged
    if isinstance(exc, pgexc.InternalClientError) and at.stage != "connect":
        # A pooled connection whose backend was just terminated is handed out while asyncpg is
        # still consuming the FATAL: the call is refused before anything is sent, and the
        # connection is unusable (the retry gets a fresh one).
        return Mapped(
            error(
                f"{where} lost its connection while {operation}: the connection was in a broken "
                "protocol state (its backend had just gone); the statement was never sent",
                "08006",
                False,
            ),
            drop_connection=True,
        )
    if isinstance(exc, TimeoutError):
        if at.stage == "acquire" and at.in_use >= at.max_size:
            exhausted = store_error(
                at.store,
                f"this process's connection pool for {where} had no free connection within "
                f"{at.acquire_timeout:g}s ({at.in_use}/{at.max_size} in use) while "
                f"{operation}; the database was not reached",
                sqlstate=None,
                may_have_run=False,
                kind=StorePoolExhaustedError,
            )
            return Mapped(exhausted)
        if at.stage in ("connect", "acquire"):
            return Mapped(
                error(
                    f"{where} unreachable while {operation}: no connection within "
                    f"{at.connect_timeout:g}s",
                    "08001",
                    False,
                )
            )
        # A time box rxmesh set (command_timeout, a per-call timeout) fired: the store did not
        # answer in time, whether the server was slow or this process stalled (the box is
        # wall-clock and runs on while the loop is blocked). Only a server-sent 57014
        # (statement_timeout, a cancel from another session) is a refused query; it is a
        # PostgresError and passed through above.
        state = (
            "the query was cancelled and the connection stayed usable"
            if at.connection_usable
            else "the connection was dropped"
        )
        return Mapped(
            error(
                f"{where} did not answer in time while {operation}: no reply within "
                f"{at.command_timeout:g}s (the time box rxmesh set, {at.time_box}; {state})",
                None,
                None,
            )
        )
    if isinstance(exc, OSError):
        if at.stage in ("connect", "acquire"):
            return Mapped(error(f"{where} unreachable while {operation}: {exc}", "08001", False))
        return Mapped(error(f"{where} lost its connection while {operation}: {exc}", "08006", None))
    return Mapped(exc)
