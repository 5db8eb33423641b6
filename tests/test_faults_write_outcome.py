"""``is_write_outcome_unknown``: may a failed write nevertheless have been applied? Both sides."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg.exceptions as pg
import pytest

from rxmesh.exceptions import StoreError, StorePoolExhaustedError
from rxmesh.faults import NOT_SENT_SQLSTATES, is_write_outcome_unknown
from tests.test_faults import chain


def lost_mid_call() -> BaseException:
    return chain(
        StoreError("connection lost during the call", sqlstate="08006", may_have_run=True),
        ConnectionResetError(104, "Connection reset by peer"),
    )


UNKNOWN: dict[str, Callable[[], BaseException]] = {
    "08006 may_have_run=True from a reset": lost_mid_call,
    "08006 with may_have_run unset (None)": lambda: chain(
        StoreError("lost", sqlstate="08006"), BrokenPipeError()
    ),
    "CDNE 08003 'closed in the middle of operation' (asyncpg)": lambda: (
        pg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
    ),
    "57P01 admin shutdown while the call ran": lambda: pg.AdminShutdownError("terminating"),
    "a stall after the statement left (no sqlstate, transient)": lambda: chain(
        StoreError("no reply", sqlstate=None, transient=True), TimeoutError()
    ),
    "wrapped in a non-DB frame": lambda: chain(RuntimeError("write failed"), lost_mid_call()),
}

KNOWN_NOT_APPLIED: dict[str, Callable[[], BaseException | None]] = {
    **{
        f"connect-phase {state}": (
            lambda state=state: chain(
                StoreError("could not connect", sqlstate=state), ConnectionRefusedError()
            )
        )
        for state in sorted(NOT_SENT_SQLSTATES)
    },
    "08006 with may_have_run=False (never sent)": lambda: chain(
        StoreError("connection already closed", sqlstate="08006", may_have_run=False),
        ConnectionResetError(),
    ),
    "pool exhausted in this process": lambda: chain(
        StorePoolExhaustedError("pool", sqlstate=None, transient=True, may_have_run=False),
        TimeoutError(),
    ),
    "a verdict the store gave: 23505": lambda: pg.UniqueViolationError("duplicate key"),
    "a verdict the store gave: 42P01": lambda: pg.UndefinedTableError("no table"),
    "a defect": lambda: RuntimeError("defect"),
    "a bare TimeoutError (a time box, not the store)": lambda: TimeoutError(),
    "None": lambda: None,
}


@pytest.mark.parametrize("build", list(UNKNOWN.values()), ids=list(UNKNOWN))
def test_a_connection_lost_after_the_write_left_leaves_the_outcome_unknown(
    build: Callable[[], BaseException],
) -> None:
    assert is_write_outcome_unknown(build())


@pytest.mark.parametrize("build", list(KNOWN_NOT_APPLIED.values()), ids=list(KNOWN_NOT_APPLIED))
def test_a_write_that_provably_never_left_or_was_refused_is_not_unknown(
    build: Callable[[], BaseException | None],
) -> None:
    assert not is_write_outcome_unknown(build())
