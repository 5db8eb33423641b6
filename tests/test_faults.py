"""The one fault rule and its siblings (the answers' wording, the standing watch, coordination):
every rule tested on both sides.

Chains are built the way real code builds them (``raise ... from ...`` and the implicit
``__context__`` of a raise inside an ``except``), except where a test needs a shape Python will not
produce by raising (cycles, 300-frame chains), which are wired by hand and say so.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable

import asyncpg.exceptions as pg
import pydantic
import pytest

from rxmesh.exceptions import (
    DeliveryErrorType,
    DeliveryFailure,
    MeshDisposedError,
    NodeValidationError,
    QueryProviderStalledError,
    StoreError,
    StorePoolExhaustedError,
)
from rxmesh.faults import (
    MAX_CHAIN_FRAMES,
    TRANSIENT_CONNECT_SQLSTATES,
    describe_may_have_partially_landed,
    describe_not_attempted,
    is_cooperative_cancellation,
    is_db_frame,
    is_no_answer_in_time,
    is_standing_watch_transient,
    is_store_unreachable,
    is_transient_connect_fault,
)

# --------------------------------------------------------------------------------------------------
# Building chains for real


class FakeDbError(Exception):
    """A minimal DB frame from no driver at all: the rule types on the ``sqlstate`` attribute."""

    def __init__(self, message: str, sqlstate: object, *, transient: object = False) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.transient = transient


def chain(*frames: BaseException) -> BaseException:
    """Raise ``frames`` outer -> inner for real: each one ``raise``d ``from`` the next inner one."""
    *outers, innermost = frames
    current: BaseException = innermost
    for outer in reversed(outers):
        try:
            try:
                raise current
            except BaseException as inner:
                raise outer from inner
        except BaseException as raised:
            current = raised
    return current


def during(outer: BaseException, inner: BaseException) -> BaseException:
    """Raise ``outer`` while handling ``inner`` (the implicit ``__context__``, no ``from``)."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - the implicit context is the point
    except BaseException as raised:
        return raised


def during_from_none(outer: BaseException, inner: BaseException) -> BaseException:
    """Raise ``outer from None`` while handling ``inner``: the context is suppressed."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer from None
    except BaseException as raised:
        return raised


def could_not_connect() -> StoreError:
    return StoreError("could not connect to 10.42.18.4:5432", sqlstate=None)


def wired(frames: list[BaseException]) -> BaseException:
    """Link ``frames`` outer -> inner by ``__cause__`` by hand (for shapes too long to raise)."""
    for outer, inner in itertools.pairwise(frames):
        outer.__cause__ = inner
    return frames[0]


# --------------------------------------------------------------------------------------------------
# The constant and the alias


UNREACHABLE_SQLSTATES = {
    "08000", "08001", "08003", "08004", "08006",
    "57P01", "57P02", "57P03",
    "53300", "53400",
}  # fmt: skip


def test_the_transient_sqlstates_are_a_frozenset_equal_to_the_documented_table() -> None:
    assert isinstance(TRANSIENT_CONNECT_SQLSTATES, frozenset)
    assert TRANSIENT_CONNECT_SQLSTATES == UNREACHABLE_SQLSTATES


def test_serialization_failure_and_deadlock_are_deliberately_not_in_the_set() -> None:
    assert "40001" not in TRANSIENT_CONNECT_SQLSTATES
    assert "40P01" not in TRANSIENT_CONNECT_SQLSTATES
    assert "57014" not in TRANSIENT_CONNECT_SQLSTATES


def test_is_store_unreachable_is_the_same_object_as_the_one_rule() -> None:
    assert is_store_unreachable is is_transient_connect_fault


def test_the_chain_cap_is_256_frames() -> None:
    assert MAX_CHAIN_FRAMES == 256


# --------------------------------------------------------------------------------------------------
# is_transient_connect_fault: must match


MUST_MATCH: list[tuple[str, Callable[[], BaseException]]] = [
    (
        "db-frame-could-not-connect-wrapping-TimeoutError",
        lambda: chain(could_not_connect(), TimeoutError()),
    ),
    (
        "db-frame-wrapping-ConnectionResetError-104",
        lambda: chain(
            StoreError("lost", sqlstate=None), ConnectionResetError(104, "reset by peer")
        ),
    ),
    (
        "db-frame-wrapping-BrokenPipeError",
        lambda: chain(StoreError("lost", sqlstate=None), BrokenPipeError(32, "Broken pipe")),
    ),
    (
        "RuntimeError-around-db-frame-around-TimeoutError",
        lambda: chain(RuntimeError("query failed"), could_not_connect(), TimeoutError()),
    ),
    (
        "RuntimeError-around-db-frame-around-ConnectionResetError",
        lambda: chain(RuntimeError("query failed"), StoreError("lost"), ConnectionResetError(104)),
    ),
    (
        "RuntimeError-around-db-frame-around-BrokenPipeError",
        lambda: chain(RuntimeError("query failed"), StoreError("lost"), BrokenPipeError(32)),
    ),
    (
        "fake-db-frame-sqlstate-None-wrapping-TimeoutError",
        lambda: chain(FakeDbError("could not connect", None), TimeoutError()),
    ),
    (
        "asyncpg-PostgresError-sqlstate-None-wrapping-ConnectionResetError",
        lambda: chain(pg.PostgresError("closed mid-operation"), ConnectionResetError(104)),
    ),
    (
        "asyncpg-CDNE-08003-wrapping-ConnectionResetError-the-measured-shape",
        lambda: chain(
            pg.ConnectionDoesNotExistError("closed in the middle of operation"),
            ConnectionResetError(104),
        ),
    ),
    (
        "provider-mapped-08001-wrapping-ConnectionRefusedError",
        lambda: chain(StoreError("connect failed", sqlstate="08001"), ConnectionRefusedError(111)),
    ),
    (
        "pool-exhausted-db-frame-wrapping-TimeoutError",
        lambda: chain(StorePoolExhaustedError("this process's pool"), TimeoutError()),
    ),
    (
        "db-frame-wrapping-socket-gaierror",
        lambda: chain(StoreError("dns"), socket.gaierror(-2, "Name or service not known")),
    ),
    (
        "db-frame-wrapping-plain-OSError",
        lambda: chain(StoreError("io"), OSError(113, "No route to host")),
    ),
    (
        "non-transient-db-frame-sets-the-flag-then-network-cause",
        lambda: chain(pg.UndefinedTableError("relation missing"), TimeoutError()),
    ),
    (
        "flag-survives-a-non-db-frame-between-db-frame-and-network",
        lambda: chain(StoreError("lost"), RuntimeError("middle"), ConnectionResetError(104)),
    ),
    (
        "validation-type-wrapping-a-connect-fault-the-condition-outranks-the-type",
        lambda: chain(NodeValidationError("bootstrap failed"), StoreError("x", sqlstate="08006")),
    ),
    (
        "implicit-context-RuntimeError-during-db-frame-from-TimeoutError",
        lambda: during(RuntimeError("cleanup failed"), chain(could_not_connect(), TimeoutError())),
    ),
    (
        "implicit-context-db-frame-during-ConnectionResetError",
        lambda: during(StoreError("lost"), ConnectionResetError(104)),
    ),
    (
        "transient-db-frame-anywhere-deep",
        lambda: chain(
            RuntimeError("a"), ValueError("b"), KeyError("c"), StoreError("x", sqlstate="57P01")
        ),
    ),
]


@pytest.mark.parametrize("build", [b for _, b in MUST_MATCH], ids=[i for i, _ in MUST_MATCH])
def test_the_one_rule_matches(build: Callable[[], BaseException]) -> None:
    assert is_transient_connect_fault(build()) is True


@pytest.mark.parametrize("sqlstate", sorted(UNREACHABLE_SQLSTATES))
@pytest.mark.parametrize("frame", ["StoreError", "FakeDbError"])
def test_every_transient_sqlstate_matches_on_any_db_frame(sqlstate: str, frame: str) -> None:
    exc = (
        StoreError("x", sqlstate=sqlstate) if frame == "StoreError" else FakeDbError("x", sqlstate)
    )
    assert is_transient_connect_fault(exc) is True
    assert is_transient_connect_fault(chain(RuntimeError("query failed"), exc)) is True


ASYNCPG_TRANSIENT = [
    pg.PostgresConnectionError,  # 08000
    pg.ClientCannotConnectError,  # 08001
    pg.ConnectionDoesNotExistError,  # 08003
    pg.ConnectionRejectionError,  # 08004
    pg.ConnectionFailureError,  # 08006
    pg.AdminShutdownError,  # 57P01
    pg.CrashShutdownError,  # 57P02
    pg.CannotConnectNowError,  # 57P03
    pg.TooManyConnectionsError,  # 53300
    pg.ConfigurationLimitExceededError,  # 53400
]


@pytest.mark.parametrize(
    "cls", ASYNCPG_TRANSIENT, ids=[f"{c.__name__}-{c.sqlstate}" for c in ASYNCPG_TRANSIENT]
)
def test_real_asyncpg_connect_classes_match_without_a_network_cause(cls: type[Exception]) -> None:
    exc = cls("the server said so")
    assert exc.sqlstate in UNREACHABLE_SQLSTATES  # type: ignore[attr-defined]
    assert is_transient_connect_fault(exc) is True


def test_the_asyncpg_table_covers_the_whole_spec_table() -> None:
    assert {c.sqlstate for c in ASYNCPG_TRANSIENT} == UNREACHABLE_SQLSTATES  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------------
# is_transient_connect_fault: must refuse

REFUSED_SQLSTATES = {
    "42P01": pg.UndefinedTableError,
    "23505": pg.UniqueViolationError,
    "42601": pg.PostgresSyntaxError,
    "42501": pg.InsufficientPrivilegeError,
    "40001": pg.SerializationError,
    "40P01": pg.DeadlockDetectedError,
    "57014": pg.QueryCanceledError,
    "55P03": pg.LockNotAvailableError,
    "22012": pg.DivisionByZeroError,
    "08P01": pg.ProtocolViolationError,  # parent is PostgresConnectionError: never by parent class
}


@pytest.mark.parametrize("sqlstate", list(REFUSED_SQLSTATES))
@pytest.mark.parametrize("frame", ["StoreError", "FakeDbError", "asyncpg"])
def test_a_verdict_sqlstate_without_a_network_cause_is_refused(sqlstate: str, frame: str) -> None:
    if frame == "StoreError":
        exc: Exception = StoreError("evaluated and refused", sqlstate=sqlstate)
    elif frame == "FakeDbError":
        exc = FakeDbError("evaluated and refused", sqlstate)
    else:
        exc = REFUSED_SQLSTATES[sqlstate]("evaluated and refused")
        assert exc.sqlstate == sqlstate  # type: ignore[attr-defined]
    assert is_transient_connect_fault(exc) is False
    assert is_transient_connect_fault(chain(RuntimeError("query failed"), exc)) is False
    # Two non-transient DB frames (a provider re-raising a driver verdict) stay refused.
    assert is_transient_connect_fault(chain(StoreError("mapped"), exc)) is False


MUST_REFUSE: list[tuple[str, Callable[[], BaseException | None]]] = [
    ("None", lambda: None),
    ("bare-TimeoutError", lambda: TimeoutError()),
    ("bare-CancelledError", lambda: asyncio.CancelledError()),
    ("bare-ConnectionResetError", lambda: ConnectionResetError(104)),
    ("bare-BrokenPipeError", lambda: BrokenPipeError(32)),
    (
        "bare-ConnectionRefusedError-unmapped-provider-must-wrap",
        lambda: ConnectionRefusedError(111, "Connection refused"),
    ),
    (
        "RuntimeError-around-TimeoutError-no-db-frame",
        lambda: chain(RuntimeError("query failed"), TimeoutError()),
    ),
    (
        "TimeoutError-from-CancelledError-asyncpg-connect-stall-unmapped",
        lambda: chain(TimeoutError(), asyncio.CancelledError()),
    ),
    (
        "network-error-OUTSIDE-a-42P01-frame",
        lambda: chain(ConnectionResetError(104), pg.UndefinedTableError("relation missing")),
    ),
    (
        "TimeoutError-OUTSIDE-a-57014-frame",
        lambda: chain(TimeoutError(), StoreError("statement timeout", sqlstate="57014")),
    ),
    ("db-frame-sqlstate-None-without-a-cause", lambda: StoreError("something", sqlstate=None)),
    (
        "db-frame-wrapping-CancelledError-not-a-network-frame",
        lambda: chain(StoreError("cancelled"), asyncio.CancelledError()),
    ),
    (
        "asyncpg-InterfaceError-has-no-sqlstate-provider-must-map",
        lambda: chain(pg.InterfaceError("connection is closed"), ConnectionResetError(104)),
    ),
    (
        "client-side-DataError-22000-from-TypeError",
        lambda: chain(pg.DataError("invalid input for query argument"), TypeError("expected str")),
    ),
    (
        "non-string-sqlstate-is-not-a-db-frame",
        lambda: chain(FakeDbError("odd", 8006), TimeoutError()),
    ),
    ("non-string-sqlstate-matching-digits-is-not-transient", lambda: FakeDbError("odd", 8006)),
    (
        "raise-from-None-stops-the-walk",
        lambda: during_from_none(RuntimeError("re-raised"), StoreError("x", sqlstate="08006")),
    ),
    ("plain-defect", lambda: RuntimeError("defect")),
    ("ValueError-wrapping-KeyError", lambda: chain(ValueError("bad"), KeyError("k"))),
    (
        "QueryProviderStalledError-is-not-a-connect-fault",
        lambda: QueryProviderStalledError(["pg"], 15.0, "q"),
    ),
]


@pytest.mark.parametrize("build", [b for _, b in MUST_REFUSE], ids=[i for i, _ in MUST_REFUSE])
def test_the_one_rule_refuses(build: Callable[[], BaseException | None]) -> None:
    assert is_transient_connect_fault(build()) is False


def test_is_db_frame_types_on_the_attribute_not_on_a_driver_class() -> None:
    assert is_db_frame(FakeDbError("x", "42P01"))
    assert is_db_frame(FakeDbError("x", None))
    assert is_db_frame(StoreError("x"))
    assert is_db_frame(pg.UndefinedTableError("x"))
    # Negative controls: no attribute, or an attribute of the wrong type.
    assert not is_db_frame(RuntimeError("x"))
    assert not is_db_frame(FakeDbError("x", 42))
    assert not is_db_frame(pg.InterfaceError("connection is closed"))


# --------------------------------------------------------------------------------------------------
# The walk: cause, context, suppression, cycles, the cap


def test_explicit_cause_is_followed_even_though_it_suppresses_context() -> None:
    exc = chain(RuntimeError("outer"), StoreError("x", sqlstate="08006"))
    assert exc.__suppress_context__ is True
    assert is_transient_connect_fault(exc) is True


def test_cause_outranks_context() -> None:
    # Raised while handling a transient fault, but explicitly from a verdict: the cause is followed.
    with pytest.raises(RuntimeError) as caught:
        try:
            raise StoreError("x", sqlstate="08006")
        except StoreError:
            raise RuntimeError("outer") from pg.UndefinedTableError("missing")
    assert isinstance(caught.value.__context__, StoreError)
    assert is_transient_connect_fault(caught.value) is False


def test_implicit_context_is_followed_and_from_none_stops_it() -> None:
    inner = StoreError("x", sqlstate="08006")
    assert is_transient_connect_fault(during(RuntimeError("during"), inner)) is True
    suppressed = during_from_none(RuntimeError("during"), StoreError("x", sqlstate="08006"))
    assert suppressed.__context__ is not None  # the context exists, it is just suppressed
    assert is_transient_connect_fault(suppressed) is False


def test_a_cyclic_chain_terminates() -> None:
    a, b = RuntimeError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a  # wired by hand: Python never raises a cycle
    assert is_transient_connect_fault(a) is False
    assert is_standing_watch_transient(a) is False
    assert is_no_answer_in_time(a) is False
    assert is_cooperative_cancellation(a) is False


def test_a_cyclic_chain_with_a_transient_frame_still_finds_it() -> None:
    a, b = RuntimeError("a"), StoreError("x", sqlstate="08006")
    a.__cause__, b.__cause__ = b, a
    assert is_transient_connect_fault(a) is True


def test_a_chain_of_300_frames_terminates() -> None:
    frames: list[BaseException] = [RuntimeError(str(i)) for i in range(300)]
    assert is_transient_connect_fault(wired(frames)) is False


@pytest.mark.parametrize(
    ("position", "expected"),
    [(0, True), (MAX_CHAIN_FRAMES - 1, True), (MAX_CHAIN_FRAMES, False), (299, False)],
    ids=["outermost", "frame-256-last-looked-at", "frame-257-beyond-the-cap", "frame-300"],
)
def test_the_256_frame_cap_is_a_guard_a_deeper_transient_frame_is_not_found(
    position: int, expected: bool
) -> None:
    frames: list[BaseException] = [RuntimeError(str(i)) for i in range(300)]
    frames[position] = StoreError("deep", sqlstate="08006")
    assert is_transient_connect_fault(wired(frames)) is expected


# --------------------------------------------------------------------------------------------------
# Exception groups: unreachable only if EVERY branch is

T = lambda: StoreError("x", sqlstate="08006")  # noqa: E731 - a short table-friendly factory
NT = lambda: pg.UndefinedTableError("relation missing")  # noqa: E731

GROUPS: list[tuple[str, Callable[[], BaseException], bool]] = [
    (
        "all-branches-transient",
        lambda: ExceptionGroup("g", [T(), chain(could_not_connect(), TimeoutError())]),
        True,
    ),
    ("one-branch-transient", lambda: ExceptionGroup("g", [T()]), True),
    ("transient-then-non-transient", lambda: ExceptionGroup("g", [T(), NT()]), False),
    ("non-transient-then-transient", lambda: ExceptionGroup("g", [NT(), T()]), False),
    (
        "nested-group-all-transient",
        lambda: ExceptionGroup("g", [ExceptionGroup("n", [T(), T()]), T()]),
        True,
    ),
    (
        "nested-group-one-non-transient",
        lambda: ExceptionGroup("g", [ExceptionGroup("n", [T(), NT()]), T()]),
        False,
    ),
    (
        "group-in-a-wrapper-all-transient",
        lambda: chain(RuntimeError("w"), ExceptionGroup("g", [T(), T()])),
        True,
    ),
    (
        "group-in-a-wrapper-one-not",
        lambda: chain(RuntimeError("w"), ExceptionGroup("g", [T(), NT()])),
        False,
    ),
    (
        "db-frame-outside-a-group-of-network-errors",
        lambda: chain(
            StoreError("lost"), ExceptionGroup("g", [TimeoutError(), ConnectionResetError(104)])
        ),
        True,
    ),
    (
        "group-of-network-errors-without-a-db-frame",
        lambda: ExceptionGroup("g", [TimeoutError(), ConnectionResetError(104)]),
        False,
    ),
    (
        "transient-next-to-a-cancellation",
        lambda: BaseExceptionGroup("g", [T(), asyncio.CancelledError()]),
        False,
    ),
]


@pytest.mark.parametrize(
    ("build", "expected"), [(b, e) for _, b, e in GROUPS], ids=[i for i, _, _ in GROUPS]
)
def test_an_exception_group_is_unreachable_only_if_every_branch_is(
    build: Callable[[], BaseException], expected: bool
) -> None:
    assert is_transient_connect_fault(build()) is expected


def test_an_empty_exception_group_cannot_be_built() -> None:
    with pytest.raises(ValueError):
        ExceptionGroup("empty", [])


def test_the_same_exception_object_in_two_branches_is_judged_in_each() -> None:
    # Two tasks awaiting one shared failed future raise the SAME object.
    shared = StoreError("x", sqlstate="08006")
    assert is_transient_connect_fault(ExceptionGroup("g", [shared, shared])) is True


def test_branches_sharing_one_cause_are_each_judged() -> None:
    cause = StoreError("x", sqlstate="08006")
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__ = b.__cause__ = cause
    assert is_transient_connect_fault(ExceptionGroup("g", [a, b])) is True
    # Negative control: the same shape around a verdict is refused.
    verdict = pg.UndefinedTableError("missing")
    c, d = RuntimeError("c"), RuntimeError("d")
    c.__cause__ = d.__cause__ = verdict
    assert is_transient_connect_fault(ExceptionGroup("g", [c, d])) is False


def test_a_wide_group_of_300_connect_faults_is_unreachable() -> None:
    # The 256-frame cap is per chain, not shared by a group's branches.
    group = ExceptionGroup("fan-out", [StoreError(str(i), sqlstate="08006") for i in range(300)])
    assert is_transient_connect_fault(group) is True
    group_with_defect = ExceptionGroup("fan-out", [*group.exceptions, RuntimeError("defect")])
    assert is_transient_connect_fault(group_with_defect) is False


def test_a_pathological_tree_of_shared_groups_terminates_quickly() -> None:
    # 2**40 paths through 41 objects: the total frame budget (a guard, like the 256 cap) bounds
    # the work. What is found within the budget stands; past it nothing more is looked at.
    tree: BaseException = StoreError("x", sqlstate="08006")
    for _ in range(40):
        tree = ExceptionGroup("g", [tree, tree])
    for classify in (
        is_transient_connect_fault,
        is_standing_watch_transient,
        is_no_answer_in_time,
        is_cooperative_cancellation,
    ):
        assert classify(tree) in (True, False)
    small: BaseException = StoreError("x", sqlstate="08006")
    for _ in range(8):
        small = ExceptionGroup("g", [small, small])
    assert is_transient_connect_fault(small) is True  # 256 paths: well within the budget


def except_star_cycle(branch: Exception) -> BaseException:
    """Re-raise a branch inside ``except*``: its ``__context__`` becomes its own group (a cycle)."""
    with pytest.raises(type(branch)) as caught:
        try:
            raise ExceptionGroup("g", [branch])
        except* Exception as eg:
            raise eg.exceptions[0]  # noqa: B904 - reproduces what real handlers do
    raised = caught.value
    assert isinstance(raised.__context__, BaseExceptionGroup)
    assert raised in raised.__context__.exceptions
    return raised


def test_a_cycle_through_a_group_branch_terminates_in_every_classifier() -> None:
    defect = except_star_cycle(RuntimeError("defect"))
    assert is_transient_connect_fault(defect) is False
    assert is_standing_watch_transient(defect) is False
    assert is_no_answer_in_time(defect) is False
    assert is_cooperative_cancellation(defect) is False
    blip = except_star_cycle(ConnectionResetError(104))
    assert is_standing_watch_transient(blip) is True


async def test_a_real_task_group_of_connect_faults_is_unreachable() -> None:
    async def fail(exc: Exception) -> None:
        await asyncio.sleep(0)
        raise exc

    async def run(*excs: Exception) -> BaseException:
        try:
            async with asyncio.timeout(5), asyncio.TaskGroup() as tg:
                for exc in excs:
                    tg.create_task(fail(exc))
        except BaseExceptionGroup as group:
            return group
        raise AssertionError("the task group did not fail")

    assert is_transient_connect_fault(await run(T(), chain(could_not_connect(), TimeoutError())))
    assert not is_transient_connect_fault(await run(T(), NT()))


# --------------------------------------------------------------------------------------------------
# is_cooperative_cancellation


def cancelled_during_timeout() -> BaseException:
    return during(asyncio.CancelledError(), TimeoutError())


COOPERATIVE: list[tuple[str, Callable[[], BaseException | None], bool]] = [
    ("CancelledError", lambda: asyncio.CancelledError(), True),
    ("CancelledError-with-a-message", lambda: asyncio.CancelledError("shutdown"), True),
    (
        "one-branch-group-of-CancelledError",
        lambda: BaseExceptionGroup("g", [asyncio.CancelledError()]),
        True,
    ),
    (
        "CancelledError-during-a-defect-no-timeout",
        lambda: during(asyncio.CancelledError(), ValueError()),
        True,
    ),
    (
        "CancelledError-raised-from-TimeoutError",
        lambda: chain(asyncio.CancelledError(), TimeoutError()),
        False,
    ),
    ("CancelledError-whose-context-is-TimeoutError", cancelled_during_timeout, False),
    (
        "CancelledError-with-a-deep-TimeoutError",
        lambda: chain(asyncio.CancelledError(), RuntimeError("x"), TimeoutError()),
        False,
    ),
    (
        "one-branch-group-of-CancelledError-from-TimeoutError",
        lambda: BaseExceptionGroup("g", [chain(asyncio.CancelledError(), TimeoutError())]),
        False,
    ),
    ("TimeoutError", lambda: TimeoutError(), False),
    ("None", lambda: None, False),
    ("RuntimeError", lambda: RuntimeError("defect"), False),
    (
        "RuntimeError-wrapping-CancelledError",
        lambda: chain(RuntimeError("x"), asyncio.CancelledError()),
        False,
    ),
    (
        "two-branch-group-of-CancelledErrors",
        lambda: BaseExceptionGroup("g", [asyncio.CancelledError(), asyncio.CancelledError()]),
        False,
    ),
    (
        "two-branch-group-CancelledError-and-defect",
        lambda: BaseExceptionGroup("g", [asyncio.CancelledError(), ValueError()]),
        False,
    ),
]


@pytest.mark.parametrize(
    ("build", "expected"), [(b, e) for _, b, e in COOPERATIVE], ids=[i for i, _, _ in COOPERATIVE]
)
def test_is_cooperative_cancellation(
    build: Callable[[], BaseException | None], expected: bool
) -> None:
    assert is_cooperative_cancellation(build()) is expected


async def test_a_real_task_cancel_is_cooperative_and_a_real_wait_for_timeout_is_not() -> None:
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(work())
    async with asyncio.timeout(5):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as cancelled:
        async with asyncio.timeout(5):
            await task
    assert is_cooperative_cancellation(cancelled.value) is True

    with pytest.raises(TimeoutError) as timed_out:
        await asyncio.wait_for(asyncio.Event().wait(), timeout=0.001)
    assert is_cooperative_cancellation(timed_out.value) is False
    assert is_transient_connect_fault(timed_out.value) is False
    assert is_no_answer_in_time(timed_out.value) is True


# --------------------------------------------------------------------------------------------------
# is_standing_watch_transient


class _Row(pydantic.BaseModel):
    version: int


def validation_error() -> pydantic.ValidationError:
    try:
        _Row.model_validate({"version": "not a number"})
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError("pydantic accepted a bad row")


def json_error() -> json.JSONDecodeError:
    try:
        json.loads("{not json")
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError("json accepted bad text")


def stalled() -> QueryProviderStalledError:
    return QueryProviderStalledError(["postgres@db:5432"], 15.0, "NodeType census")


CR = lambda: ConnectionResetError(104, "Connection reset by peer")  # noqa: E731
DEFECT = lambda: RuntimeError("defect")  # noqa: E731

WATCH: list[tuple[str, Callable[[], BaseException | None], bool]] = [
    ("transient-connect-fault-08006", lambda: StoreError("x", sqlstate="08006"), True),
    (
        "transient-connect-fault-db-frame-from-TimeoutError",
        lambda: chain(could_not_connect(), TimeoutError()),
        True,
    ),
    ("asyncpg-CannotConnectNowError", lambda: pg.CannotConnectNowError("starting up"), True),
    ("db-frame-marked-transient-by-its-driver", lambda: StoreError("blip", transient=True), True),
    ("fake-db-frame-marked-transient", lambda: FakeDbError("blip", "XX000", transient=True), True),
    ("ConnectionResetError-bare", CR, True),
    ("ConnectionRefusedError-bare", lambda: ConnectionRefusedError(111), True),
    ("BrokenPipeError-bare", lambda: BrokenPipeError(32), True),
    ("socket-gaierror", lambda: socket.gaierror(-3, "Temporary failure in name resolution"), True),
    ("QueryProviderStalledError-bare", stalled, True),
    ("QueryProviderStalledError-as-a-cause", lambda: chain(RuntimeError("merge"), stalled()), True),
    ("QueryProviderStalledError-as-a-context", lambda: during(ValueError("x"), stalled()), True),
    ("RuntimeError-wrapping-ConnectionResetError", lambda: chain(RuntimeError("x"), CR()), True),
    ("group-every-branch-transient", lambda: ExceptionGroup("g", [CR(), stalled()]), True),
    ("group-every-branch-transient-reversed", lambda: ExceptionGroup("g", [stalled(), CR()]), True),
    (
        "group-in-a-wrapper-every-branch",
        lambda: chain(
            RuntimeError("w"), ExceptionGroup("g", [CR(), StoreError("x", sqlstate="57P01")])
        ),
        True,
    ),
    (
        "nested-groups-every-branch",
        lambda: ExceptionGroup("g", [ExceptionGroup("n", [CR(), CR()]), socket.gaierror(-2, "x")]),
        True,
    ),
    # Must refuse
    ("None", lambda: None, False),
    ("bare-TimeoutError-is-a-time-box-not-a-blip", lambda: TimeoutError(), False),
    ("RuntimeError-wrapping-TimeoutError", lambda: chain(RuntimeError("x"), TimeoutError()), False),
    ("42P01-StoreError", lambda: StoreError("relation missing", sqlstate="42P01"), False),
    ("asyncpg-UndefinedTableError", lambda: pg.UndefinedTableError("missing"), False),
    ("db-frame-transient-False", lambda: StoreError("x", transient=False), False),
    (
        "db-frame-transient-truthy-but-not-True",
        lambda: FakeDbError("x", "XX000", transient=1),
        False,
    ),
    ("pydantic-ValidationError-deserialization", validation_error, False),
    ("json-JSONDecodeError-deserialization", json_error, False),
    ("RuntimeError-defect", DEFECT, False),
    ("MeshDisposedError", lambda: MeshDisposedError("disposed"), False),
    (
        "MeshDisposedError-wrapping-ConnectionError",
        lambda: chain(MeshDisposedError("d"), CR()),
        False,
    ),
    (
        "MeshDisposedError-wrapping-a-connect-fault",
        lambda: chain(MeshDisposedError("d"), StoreError("x", sqlstate="08006")),
        False,
    ),
    (
        "ConnectionError-wrapping-MeshDisposedError",
        lambda: chain(CR(), MeshDisposedError("d")),
        False,
    ),
    (
        "group-with-a-disposed-branch-wrapping-a-connect-fault",
        lambda: ExceptionGroup(
            "g", [chain(MeshDisposedError("d"), StoreError("x", sqlstate="08006"))]
        ),
        False,
    ),
    ("group-transient-then-defect", lambda: ExceptionGroup("g", [CR(), DEFECT()]), False),
    ("group-defect-then-transient", lambda: ExceptionGroup("g", [DEFECT(), CR()]), False),
    (
        "group-in-a-wrapper-transient-then-defect",
        lambda: chain(RuntimeError("w"), ExceptionGroup("g", [CR(), DEFECT()])),
        False,
    ),
    (
        "group-in-a-wrapper-defect-then-transient",
        lambda: chain(RuntimeError("w"), ExceptionGroup("g", [DEFECT(), CR()])),
        False,
    ),
    (
        "nested-group-with-a-deserialization-branch",
        lambda: ExceptionGroup("g", [ExceptionGroup("n", [CR(), json_error()]), CR()]),
        False,
    ),
    (
        "group-with-a-bare-TimeoutError-branch",
        lambda: ExceptionGroup("g", [CR(), TimeoutError()]),
        False,
    ),
    ("bare-CancelledError", lambda: asyncio.CancelledError(), False),
]


@pytest.mark.parametrize(
    ("build", "expected"), [(b, e) for _, b, e in WATCH], ids=[i for i, _, _ in WATCH]
)
def test_is_standing_watch_transient(
    build: Callable[[], BaseException | None], expected: bool
) -> None:
    assert is_standing_watch_transient(build()) is expected


def test_every_transient_connect_fault_is_standing_watch_transient() -> None:
    for _, build in MUST_MATCH:
        exc = build()
        assert is_standing_watch_transient(exc), exc


# --------------------------------------------------------------------------------------------------
# is_no_answer_in_time

ROUTER_TEXT = (
    "Delivery to 'admin/build' failed: "
    "Response did not arrive on time in 30s for message ClaimBuild"
)
F = DeliveryErrorType.FAILED

NO_ANSWER: list[tuple[str, Callable[[], BaseException | None], bool]] = [
    ("TimeoutError", lambda: TimeoutError(), True),
    (
        "router-FAILED-response-did-not-arrive-on-time",
        lambda: DeliveryFailure(F, ROUTER_TEXT),
        True,
    ),
    ("FAILED-as-a-plain-string-error-type", lambda: DeliveryFailure("FAILED", ROUTER_TEXT), True),
    ("FAILED-upper-case-phrase", lambda: DeliveryFailure(F, ROUTER_TEXT.upper()), True),
    ("FAILED-lower-case-phrase", lambda: DeliveryFailure(F, ROUTER_TEXT.lower()), True),
    (
        "FAILED-placement-operation-timed-out",
        lambda: DeliveryFailure(F, "Placement operation timed out for 'admin/build'"),
        True,
    ),
    (
        "in-a-group-branch",
        lambda: ExceptionGroup("g", [ValueError(), DeliveryFailure(F, ROUTER_TEXT)]),
        True,
    ),
    (
        "TimeoutError-in-a-group-branch",
        lambda: ExceptionGroup("g", [TimeoutError(), KeyError()]),
        True,
    ),
    (
        "in-a-nested-group",
        lambda: ExceptionGroup("g", [ValueError(), ExceptionGroup("n", [TimeoutError()])]),
        True,
    ),
    ("wrapped-in-a-RuntimeError", lambda: chain(RuntimeError("handshake"), TimeoutError()), True),
    (
        "NACK-wrapped-in-a-RuntimeError",
        lambda: chain(RuntimeError("x"), DeliveryFailure(F, ROUTER_TEXT)),
        True,
    ),
    (
        "NACK-as-implicit-context",
        lambda: during(RuntimeError("x"), DeliveryFailure(F, ROUTER_TEXT)),
        True,
    ),
    # Never
    (
        "FORBIDDEN-quoting-the-phrase",
        lambda: DeliveryFailure(
            DeliveryErrorType.FORBIDDEN,
            "Access denied to 'admin/build' (last hop said: Response did not arrive on time)",
        ),
        False,
    ),
    (
        "NOT_FOUND-quoting-the-phrase",
        lambda: DeliveryFailure(
            DeliveryErrorType.NOT_FOUND, "No hub; Response did not arrive on time"
        ),
        False,
    ),
    (
        "UNAVAILABLE-quoting-the-phrase",
        lambda: DeliveryFailure(DeliveryErrorType.UNAVAILABLE, "Placement operation timed out"),
        False,
    ),
    (
        "SHUTTING_DOWN-quoting-the-phrase",
        lambda: DeliveryFailure(DeliveryErrorType.SHUTTING_DOWN, "Response did not arrive on time"),
        False,
    ),
    (
        "FAILED-without-the-phrases",
        lambda: DeliveryFailure(F, "Delivery to 'admin/build' failed: KeyError 'fingerprint'"),
        False,
    ),
    (
        "FAILED-with-a-similar-but-different-phrase",
        lambda: DeliveryFailure(F, "request timed out"),
        False,
    ),
    (
        "verdict-NACK-wrapped",
        lambda: chain(RuntimeError("x"), DeliveryFailure(DeliveryErrorType.FORBIDDEN, ROUTER_TEXT)),
        False,
    ),
    ("ValueError", lambda: ValueError("bad claim"), False),
    ("None", lambda: None, False),
    ("QueryProviderStalledError-is-not-a-TimeoutError", stalled, False),
    ("CancelledError", lambda: asyncio.CancelledError(), False),
    ("group-without-timeouts", lambda: ExceptionGroup("g", [ValueError(), KeyError()]), False),
    (
        "RuntimeError-from-None-during-a-timeout",
        lambda: during_from_none(RuntimeError("x"), TimeoutError()),
        False,
    ),
]


@pytest.mark.parametrize(
    ("build", "expected"), [(b, e) for _, b, e in NO_ANSWER], ids=[i for i, _, _ in NO_ANSWER]
)
def test_is_no_answer_in_time(build: Callable[[], BaseException | None], expected: bool) -> None:
    assert is_no_answer_in_time(build()) is expected


def test_is_no_answer_in_time_is_cycle_safe() -> None:
    a, b = RuntimeError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert is_no_answer_in_time(a) is False
    c, d = RuntimeError("c"), TimeoutError()
    c.__cause__, d.__cause__ = d, c
    assert is_no_answer_in_time(c) is True


def test_a_transport_timeout_is_no_answer_in_time_but_not_a_store_outage() -> None:
    nack = DeliveryFailure(F, ROUTER_TEXT)
    assert is_no_answer_in_time(nack) is True
    assert is_transient_connect_fault(nack) is False
    assert is_standing_watch_transient(nack) is False


# --------------------------------------------------------------------------------------------------
# The two message builders


def test_describe_not_attempted_says_what_a_caller_must_do() -> None:
    text = describe_not_attempted("Node creation at 'a/b'")
    assert text.startswith("Node creation at 'a/b'")
    assert "unreachable" in text
    assert "Nothing was written" in text
    assert "same node id" in text
    assert "Unexpected error" not in text


def test_describe_may_have_partially_landed_never_says_nothing_was_written() -> None:
    text = describe_may_have_partially_landed("Bulk creation of 3 node(s)")
    assert text.startswith("Bulk creation of 3 node(s)")
    assert "Nothing was written" not in text
    assert "nothing was written" not in text.lower()
    assert "Read the current state before retrying" in text
    assert "Unexpected error" not in text


# --------------------------------------------------------------------------------------------------
# Core imports without asyncpg

BLOCK_ASYNCPG = textwrap.dedent(
    """
    import importlib.abc
    import sys

    class BlockAsyncpg(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "asyncpg" or name.startswith("asyncpg."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, BlockAsyncpg())
    sys.modules["asyncpg"] = None
    """
)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_core_imports_without_asyncpg() -> None:
    result = run_python(
        BLOCK_ASYNCPG
        + textwrap.dedent(
            """
            import rxmesh, rxmesh.faults, rxmesh.exceptions, rxmesh.operators
            from rxmesh.exceptions import StoreError
            from rxmesh.faults import is_transient_connect_fault
            assert is_transient_connect_fault(StoreError("x", sqlstate="08006"))
            loaded = [n for n, m in sys.modules.items() if n.startswith("asyncpg") and m]
            assert not loaded, loaded
            print("ok")
            """
        )
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_asyncpg_block_really_blocks() -> None:
    # Negative control: without it, the test above would prove nothing.
    result = run_python(BLOCK_ASYNCPG + "import asyncpg\n")
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr or "ImportError" in result.stderr


def test_a_group_anywhere_in_the_chain_decides_even_under_a_transient_outer_frame() -> None:
    """A group anywhere in the chain is transient only if every branch is — also when
    a frame outside it (here a socket error raised from it) would pass on its own."""
    mixed = ExceptionGroup("two providers", [ConnectionResetError(104), RuntimeError("defect")])
    outer = chain(ConnectionResetError(104, "while draining"), mixed)
    assert is_standing_watch_transient(outer) is False
    # Control: the same shape with every branch transient re-opens.
    clean = ExceptionGroup("two providers", [ConnectionResetError(104), BrokenPipeError(32)])
    assert is_standing_watch_transient(chain(ConnectionResetError(104), clean)) is True
