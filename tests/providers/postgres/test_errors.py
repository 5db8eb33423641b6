"""The driver -> StoreError mapping (rxmesh.providers.postgres._errors), row by row, without a
server: each row of the table in docs/providers.md ("asyncpg gives ... the caller gets"), and
beside each rule the exception that must not be mapped that way (its negative control)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import asyncpg.exceptions as pgexc
import pytest

from rxmesh.exceptions import StoreError, StorePoolExhaustedError
from rxmesh.faults import is_store_unreachable, is_write_outcome_unknown
from rxmesh.providers.postgres._errors import Boundary, Mapped, to_store_error

AT = Boundary(
    store="postgres@db:5432/mesh",
    operation="writing 'p/a'",
    stage="query",
    target_session_attrs="read-write",
    in_use=1,
    max_size=4,
    acquire_timeout=3.0,
    connect_timeout=2.0,
    command_timeout=7.0,
)


def _raised(exc: BaseException, at: Boundary = AT) -> tuple[BaseException, Mapped]:
    """What the caller raises: the mapped error ``from`` the driver's, or the driver's itself."""
    mapped = to_store_error(exc, at)
    try:
        if mapped.error is exc:
            raise exc
        raise mapped.error from exc
    except BaseException as error:  # the error under test
        return error, mapped


def _cdne_interface_error() -> pgexc.InterfaceError:
    error = pgexc.InterfaceError("cannot call Connection.fetch(): connection has been released")
    error.__context__ = pgexc.ConnectionDoesNotExistError("connection was closed in the middle")
    return error


def _pooler_refusal() -> pgexc.ProtocolViolationError:
    return pgexc.ProtocolViolationError(
        "server login has been failing, try again later (server_login_retry)"
    )


# (row, exception, boundary changes, sqlstate, may_have_run, words of the message, drop)
MAPPED: list[tuple[str, Any, dict[str, Any], str | None, bool | None, tuple[str, ...], bool]] = [
    (
        "InterfaceError whose context is CDNE",
        _cdne_interface_error,
        {},
        "08006",
        True,
        ("lost its connection", "may have run", "writing 'p/a'"),
        False,
    ),
    (
        "InterfaceError on a closed connection",
        lambda: pgexc.InterfaceError("connection is closed"),
        {"connection_closed": True},
        "08006",
        False,
        ("lost its connection", "never sent"),
        False,
    ),
    (
        "TimeoutError while connecting",
        TimeoutError,
        {"stage": "connect"},
        "08001",
        False,
        ("unreachable", "no connection within 2s"),
        False,
    ),
    (
        "OSError while connecting",
        lambda: ConnectionRefusedError(111, "Connection refused"),
        {"stage": "connect"},
        "08001",
        False,
        ("unreachable", "Connection refused"),
        False,
    ),
    (
        "TimeoutError waiting for a pool connection that is not full",
        TimeoutError,
        {"stage": "acquire"},
        "08001",
        False,
        ("unreachable", "no connection within"),
        False,
    ),
    (
        "query TimeoutError, the connection still answering",
        TimeoutError,
        {"connection_usable": True},
        None,
        None,
        ("did not answer in time", "within 7s", "stayed usable"),
        False,
    ),
    (
        "query TimeoutError, the connection dropped",
        TimeoutError,
        {"connection_usable": False},
        None,
        None,
        ("did not answer in time", "the connection was dropped"),
        False,
    ),
    (
        "the probe's own time box fired",
        TimeoutError,
        {"command_timeout": 2.0, "time_box": "heartbeat_timeout"},
        None,
        None,
        ("did not answer in time", "within 2s", "heartbeat_timeout"),
        False,
    ),
    (
        "OSError during a query",
        lambda: ConnectionResetError(104, "Connection reset by peer"),
        {},
        "08006",
        None,
        ("lost its connection", "Connection reset by peer"),
        False,
    ),
    (
        "25006 on a standby in recovery",
        lambda: pgexc.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only txn"),
        {"in_recovery": True},
        "08000",
        False,
        ("could not take the write", "standby in recovery", "target_session_attrs"),
        True,
    ),
    (
        "25006 from a server in read-only mode",
        lambda: pgexc.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only txn"),
        {"in_recovery": False},
        "08000",
        False,
        ("could not take the write", "refuses writes"),
        True,
    ),
    (
        "26000 asyncpg's prepared statement missing",
        lambda: pgexc.InvalidSQLStatementNameError('prepared statement "__asyncpg_1__" missing'),
        {},
        "08000",
        False,
        ("prepared statement", "pooled=True", "nothing ran"),
        True,
    ),
    (
        "42P05 asyncpg's prepared statement clashing",
        lambda: pgexc.DuplicatePreparedStatementError('prepared statement "__asyncpg_1__"'),
        {},
        "08000",
        False,
        ("prepared statement", "pooled=True"),
        True,
    ),
    (
        "no host matches target_session_attrs",
        lambda: pgexc.TargetServerAttributeNotMatched("None of the hosts match"),
        {"stage": "connect"},
        "08001",
        False,
        ("unreachable", "target_session_attrs='read-write'"),
        False,
    ),
    (
        "the pooler refused before reaching a server",
        _pooler_refusal,
        {},
        "08001",
        False,
        ("connection pooler refused", "server login has been failing", "nothing ran"),
        True,
    ),
    (
        "a broken protocol state on a just-terminated pooled connection",
        lambda: pgexc.InternalClientError("cannot switch to state 12; another operation"),
        {},
        "08006",
        False,
        ("broken protocol state", "never sent"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("exc", "changes", "sqlstate", "may_have_run", "words", "drop"),
    [pytest.param(*row[1:], id=row[0]) for row in MAPPED],
)
def test_a_driver_failure_becomes_a_transient_store_error(
    exc: Any,
    changes: dict[str, Any],
    sqlstate: str | None,
    may_have_run: bool | None,
    words: tuple[str, ...],
    drop: bool,
) -> None:
    driver = exc()
    error, mapped = _raised(driver, replace(AT, **changes))
    assert type(error) is StoreError
    assert error.sqlstate == sqlstate
    assert error.transient is True
    assert error.may_have_run is may_have_run
    assert error.store == AT.store
    assert error.__cause__ is driver
    for word in words:
        assert word in str(error), (word, str(error))
    assert mapped.drop_connection is drop
    assert is_store_unreachable(error)
    assert is_write_outcome_unknown(error) is (may_have_run is not False)


def test_a_full_pool_is_this_processs_own_exhaustion() -> None:
    error, mapped = _raised(TimeoutError(), replace(AT, stage="acquire", in_use=4))
    assert isinstance(error, StorePoolExhaustedError)
    assert error.sqlstate is None
    assert error.may_have_run is False
    assert "this process's connection pool" in str(error)
    assert "(4/4 in use)" in str(error)
    assert "within 3s" in str(error)  # the wait for a pool connection, not connect_timeout
    assert not mapped.drop_connection
    assert is_store_unreachable(error)


def test_negative_control_a_pool_with_room_is_no_exhaustion() -> None:
    error, _ = _raised(TimeoutError(), replace(AT, stage="acquire", in_use=3))
    assert not isinstance(error, StorePoolExhaustedError)
    assert error.sqlstate == "08001"  # type: ignore[attr-defined]


# The exceptions that pass through unchanged: each one is the negative control of a rule above.
UNCHANGED: list[tuple[str, Any, dict[str, Any]]] = [
    (
        "a PostgresError is the server's verdict (control of 25006, 26000, 42P05)",
        lambda: pgexc.UndefinedTableError('relation "x" does not exist'),
        {},
    ),
    (
        "a serialization failure keeps its own sqlstate (control of 25006)",
        lambda: pgexc.SerializationError("could not serialize access"),
        {},
    ),
    (
        "CDNE itself keeps 08003 (control of the CDNE context)",
        lambda: pgexc.ConnectionDoesNotExistError("connection was closed in the middle"),
        {},
    ),
    (
        "a protocol violation that is no pooler refusal (control of the pooler row)",
        lambda: pgexc.ProtocolViolationError("unexpected message type"),
        {},
    ),
    (
        "an InterfaceError on an open connection is a defect (control of closed and CDNE)",
        lambda: pgexc.InterfaceError("cannot perform operation: another operation is in progress"),
        {"connection_closed": False},
    ),
    (
        "a broken protocol state while connecting (control of the just-terminated row)",
        lambda: pgexc.InternalClientError("cannot switch to state 12; another operation"),
        {"stage": "connect"},
    ),
    (
        "a StoreError is mapped already",
        lambda: StoreError("refused", sqlstate="42P01", store="other"),
        {},
    ),
    ("anything else is not the driver's", lambda: ValueError("a bug"), {}),
]


@pytest.mark.parametrize(
    ("exc", "changes"), [pytest.param(*row[1:], id=row[0]) for row in UNCHANGED]
)
def test_what_is_not_a_driver_fault_of_the_table_passes_unchanged(
    exc: Any, changes: dict[str, Any]
) -> None:
    driver = exc()
    error, mapped = _raised(driver, replace(AT, **changes))
    assert error is driver
    assert mapped == Mapped(driver, drop_connection=False)


def test_negative_control_an_unchanged_verdict_is_not_unreachable() -> None:
    error, _ = _raised(pgexc.UndefinedTableError('relation "x" does not exist'))
    assert not is_store_unreachable(error)


def test_the_mapping_reads_nothing_but_its_arguments() -> None:
    """Pure: the same exception and boundary give equal answers, and the boundary says all."""
    first, _ = _raised(TimeoutError(), replace(AT, stage="acquire", in_use=4))
    second, _ = _raised(TimeoutError(), replace(AT, stage="acquire", in_use=4))
    assert str(first) == str(second)
    assert type(first) is type(second)
