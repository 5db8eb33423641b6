"""While the store is known unreachable, operations share one connection attempt at a time
(rxmesh.providers.postgres._attempts; issue 16, item 5: 1,000 creates in an outage made 4,000
attempts).

The attempt here is a coroutine the test releases by hand, so every interleaving is chosen, not
timed. The classification is the one rule's (rxmesh.faults), applied to the store's own errors.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import NoReturn

from rxmesh.exceptions import StoreError, StorePoolExhaustedError
from rxmesh.faults import is_transient_connect_fault
from rxmesh.providers.postgres import PostgresStore
from rxmesh.providers.postgres._attempts import SharedAttempts
from rxmesh.providers.postgres._errors import marks_unreachable

BOUND = 5.0


def _unreachable() -> StoreError:
    error = StoreError("store 's' unreachable while testing", sqlstate=None, transient=True)
    error.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    return error


class _Attempts:
    """Attempts that each wait for the test to settle them; every one made is kept."""

    def __init__(self) -> None:
        self.made: list[asyncio.Future[str]] = []

    async def __call__(self) -> str:
        made: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.made.append(made)
        try:
            return await made
        finally:
            del made  # its exception's traceback holds this frame: no cycle of the test's own

    async def until(self, count: int) -> None:
        async with asyncio.timeout(BOUND):
            while len(self.made) < count:  # noqa: ASYNC110 - the callers' turns, no time
                await asyncio.sleep(0)


class _Answered(Exception):
    """What a caller answered from another's failure raises here (its own object)."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(f"answered from {failure}")
        self.failure = failure


def _answer(failure: BaseException) -> NoReturn:
    raise _Answered(failure)


def _callers(shared: SharedAttempts, attempts: _Attempts, n: int) -> list[asyncio.Task[str]]:
    return [
        asyncio.ensure_future(
            shared.attempt(attempts, unreachable=marks_unreachable, answer=_answer)
        )
        for _ in range(n)
    ]


async def _settle(tasks: list[asyncio.Task[str]]) -> list[object]:
    async with asyncio.timeout(BOUND):
        return list(await asyncio.gather(*tasks, return_exceptions=True))


async def _down(shared: SharedAttempts, attempts: _Attempts) -> None:
    """Make the store known unreachable: one attempt fails so."""
    (first,) = _callers(shared, attempts, 1)
    await attempts.until(len(attempts.made) + 1)
    attempts.made[-1].set_exception(_unreachable())
    (outcome,) = await _settle([first])
    assert isinstance(outcome, StoreError) and shared.down


async def test_while_the_store_answers_every_caller_makes_its_own_attempt() -> None:
    shared, attempts = SharedAttempts(), _Attempts()
    tasks = _callers(shared, attempts, 3)
    await attempts.until(3)  # three in flight at once: nothing is serialised while it is up
    for i, made in enumerate(attempts.made):
        made.set_result(f"conn{i}")
    assert await _settle(tasks) == ["conn0", "conn1", "conn2"]
    assert not shared.down and shared.shared == 0


async def test_callers_arriving_while_the_store_is_down_share_the_attempt_in_flight() -> None:
    shared, attempts = SharedAttempts(), _Attempts()
    await _down(shared, attempts)
    tasks = _callers(shared, attempts, 5)
    await attempts.until(2)
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(attempts.made) == 2  # the first failure, then ONE attempt for the five
    failure = _unreachable()
    attempts.made[1].set_exception(failure)
    outcomes = await _settle(tasks)
    assert outcomes[0] is failure  # the leader's own error, unchanged
    answered = outcomes[1:]
    assert all(isinstance(o, _Answered) and o.failure is failure for o in answered)
    assert len({id(o) for o in answered}) == 4  # each caller raised its own object
    assert shared.shared == 4 and shared.down


async def test_a_failure_that_is_not_unreachable_is_not_shared_and_ends_the_outage() -> None:
    """The negative control: an attempt the store answered with a refusal (here a pool with
    every connection busy, no evidence about reaching the store) answers only its caller;
    the others make their own attempts."""
    shared, attempts = SharedAttempts(), _Attempts()
    await _down(shared, attempts)
    tasks = _callers(shared, attempts, 3)
    await attempts.until(2)
    busy = StorePoolExhaustedError("no free connection", sqlstate=None, transient=True)
    busy.__cause__ = TimeoutError()
    assert is_transient_connect_fault(busy)  # the one rule alone would call it unreachable
    attempts.made[1].set_exception(busy)
    await attempts.until(4)  # the two waiters now try for themselves, at once
    assert not shared.down
    attempts.made[2].set_result("a")
    attempts.made[3].set_result("b")
    outcomes = await _settle(tasks)
    assert outcomes[0] is busy and sorted(map(str, outcomes[1:])) == ["a", "b"]
    assert shared.shared == 0


async def test_an_attempt_that_succeeds_ends_the_outage_and_the_waiters_connect_alone() -> None:
    shared, attempts = SharedAttempts(), _Attempts()
    await _down(shared, attempts)
    tasks = _callers(shared, attempts, 3)
    await attempts.until(2)
    attempts.made[1].set_result("lead")
    await attempts.until(4)
    attempts.made[2].set_result("w1")
    attempts.made[3].set_result("w2")
    assert sorted(map(str, await _settle(tasks))) == ["lead", "w1", "w2"]
    assert not shared.down and shared.shared == 0


async def test_a_cancelled_leader_hands_the_attempt_to_a_waiter() -> None:
    shared, attempts = SharedAttempts(), _Attempts()
    await _down(shared, attempts)
    tasks = _callers(shared, attempts, 3)
    await attempts.until(2)
    tasks[0].cancel()  # the leader's caller gives up: that says nothing about the store
    await attempts.until(3)  # one waiter leads now, the other waits for it
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(attempts.made) == 3 and shared.down
    failure = _unreachable()
    attempts.made[2].set_exception(failure)
    outcomes = await _settle(tasks)
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert failure in outcomes[1:]
    assert any(isinstance(o, _Answered) and o.failure is failure for o in outcomes[1:])


async def test_a_cancelled_waiter_leaves_the_attempt_in_flight() -> None:
    shared, attempts = SharedAttempts(), _Attempts()
    await _down(shared, attempts)
    tasks = _callers(shared, attempts, 2)
    await attempts.until(2)
    await asyncio.sleep(0)
    tasks[1].cancel()
    await asyncio.sleep(0)
    assert not attempts.made[1].done()
    attempts.made[1].set_result("lead")
    outcomes = await _settle(tasks)
    assert outcomes[0] == "lead" and isinstance(outcomes[1], asyncio.CancelledError)


def test_only_an_unreachable_store_marks_it_down() -> None:
    assert marks_unreachable(_unreachable())
    busy = StorePoolExhaustedError("no free connection", sqlstate=None, transient=True)
    busy.__cause__ = TimeoutError()
    assert not marks_unreachable(busy)
    assert not marks_unreachable(StoreError("refused", sqlstate="42P01"))


async def test_a_shared_failure_leaves_no_reference_cycle_behind() -> None:
    """Regression: the frames that raise a shared failure held the error whose traceback holds
    them (the leader's ``failure``, each waiter's), so every error of an outage was cyclic
    garbage: 176 objects a create in bench/loop_steps.py's ``unavailable`` scenario waited for
    the collector, feeding its full passes (26 after, all the driver's own). Now reference
    counting frees them as soon as the callers drop their errors."""
    shared, attempts = SharedAttempts(), _Attempts()
    gc.collect()
    gc.disable()
    try:
        await _down(shared, attempts)
        tasks = _callers(shared, attempts, 3)
        await attempts.until(2)
        for _ in range(3):
            await asyncio.sleep(0)
        attempts.made[1].set_exception(_unreachable())
        outcomes = await _settle(tasks)
        errors = [weakref.ref(o) for o in outcomes if isinstance(o, BaseException)]
        assert len(errors) == 3
        del outcomes, tasks
        attempts.made.clear()
        for _ in range(3):
            await asyncio.sleep(0)
        assert [ref() for ref in errors] == [None, None, None]  # freed without a collection
    finally:
        gc.enable()


def test_the_stores_answer_to_a_shared_failure_is_its_own_and_freed_without_a_collection() -> None:
    """The store's ``answer``: the error the waiting operation's own attempt would have raised
    (the boundary's mapping of the same driver fault, naming this operation), noted as shared;
    and, regression as above, no frame of it holds the error it raises."""
    store = PostgresStore("postgresql://rxmesh@127.0.0.1:1/db")
    failure = StoreError("store 's' unreachable while writing 'p/a'", sqlstate="08001")
    failure.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    gc.collect()
    gc.disable()
    try:
        caught: list[StoreError] = []
        try:
            store._connections._answer_shared("reading 'p/x'", failure)
        except StoreError as raised:
            caught.append(raised)
        (error,) = caught
        assert error is not failure and "'p/x'" in str(error) and "'p/a'" not in str(error)
        assert is_transient_connect_fault(error)
        assert error.__cause__ is failure.__cause__  # the same driver fault, mapped again
        assert "no connection attempt of its own" in error.__notes__[0]
        freed = weakref.ref(error)
        del error
        caught.clear()
        assert freed() is None
    finally:
        gc.enable()


async def _objects_per_waiter(n: int, *, shared_wait: bool) -> float:
    """Objects the collector tracks per caller while ``n`` callers wait: for the attempt in
    flight (``shared_wait``) or, the floor, each for a future of its own (a task, its coroutine
    and the future it waits on)."""
    shared, attempts = SharedAttempts(), _Attempts()
    await _down(shared, attempts)
    blocked: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def floor() -> str:
        return await blocked

    gc.collect()
    before = len(gc.get_objects())
    if shared_wait:
        tasks = _callers(shared, attempts, n + 1)  # the first leads, ``n`` wait
        await attempts.until(2)
    else:
        tasks = [asyncio.ensure_future(floor()) for _ in range(n + 1)]
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()
    per_caller = (len(gc.get_objects()) - before) / (n + 1)
    if shared_wait:  # every waiter answered from it: nobody tries again
        attempts.made[-1].set_exception(_unreachable())
    else:
        blocked.set_result("conn")
    await _settle(tasks)
    return per_caller


async def test_a_caller_waiting_for_the_attempt_in_flight_holds_no_more_than_the_floor() -> None:
    """Regression (fails against 1ab1760: 18.9 objects a caller against the floor's 6.9): each
    caller waited through ``asyncio.shield`` of the attempt's future (a future of its own, two
    done-callbacks with their closure cells and copied contexts), for each of the 1,000
    operations waiting in an outage (bench/loop_steps.py's ``unavailable``: 190-198 young
    collections in the window, 176 without them). Now a caller waits on one future of its own.
    The floor: the same number of tasks each waiting on a plain future."""
    floor = await _objects_per_waiter(200, shared_wait=False)
    waiting = await _objects_per_waiter(200, shared_wait=True)
    assert floor > 0  # the count sees tasks at all (else any bound would pass)
    assert waiting - floor <= 1.0, (floor, waiting)
