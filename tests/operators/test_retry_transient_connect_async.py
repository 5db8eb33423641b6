"""``retry_transient_connect_async``: the ladder's first rung for async generators.

The same negative controls as the operator's: a defect ends the iteration at once, a fault after
the first item propagates with no restart, cancelling during a backoff restarts nothing, nothing
yielded is yielded twice. Waits run on a ``TestScheduler`` (virtual time).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest
from reactivex.testing import TestScheduler

from rxmesh.aio import retry_transient_connect_async
from rxmesh.operators import DEFAULT_RETRY_DELAYS, retry_transient_connect
from rxmesh.testing import unreachable_error
from tests.operators._shared import Script, connect_fault, consume, run_until


async def test_faults_before_the_first_item_are_retried_on_the_default_delays() -> None:
    scheduler = TestScheduler()
    script = Script(([], unreachable_error()), ([], connect_fault()), (["a", "b"], None))
    retries: list[tuple[int, float]] = []
    orders = retry_transient_connect_async(
        on_retry=lambda error, attempt, delay: retries.append((attempt, delay)),
        scheduler=scheduler,
    )(script)
    items, ended = await consume(orders(), scheduler)
    assert (items, ended) == (["a", "b"], None)
    assert script.calls == 3
    assert retries == [(1, 0.25), (2, 0.5)]
    assert scheduler.clock == pytest.approx(0.8, abs=0.06)  # 0.25 + 0.5, in steps of 0.05


async def test_the_budget_spent_the_last_error_surfaces_the_same_object() -> None:
    scheduler = TestScheduler()
    faults = [unreachable_error() for _ in range(4)]
    script = Script(*[([], fault) for fault in faults])
    items, ended = await consume(
        retry_transient_connect_async(scheduler=scheduler)(script)(), scheduler
    )
    assert items == []
    assert ended is faults[-1]
    assert script.calls == 4  # one call, then len(DEFAULT_RETRY_DELAYS) retries
    assert script.closed == 4


async def test_a_defect_ends_the_iteration_at_once() -> None:
    scheduler = TestScheduler()
    defect = ValueError("a bug, not an outage")
    script = Script(([], defect), (["never"], None))
    retries: list[object] = []
    orders = retry_transient_connect_async(
        on_retry=lambda *args: retries.append(args), scheduler=scheduler
    )(script)
    items, ended = await consume(orders(), scheduler, step=10.0)
    assert (items, ended) == ([], defect)
    assert script.calls == 1
    assert retries == []


async def test_a_fault_after_the_first_item_propagates_with_no_restart() -> None:
    scheduler = TestScheduler()
    fault = unreachable_error()
    script = Script((["order 1"], fault), (["order 1", "order 2"], None))
    items, ended = await consume(
        retry_transient_connect_async(scheduler=scheduler)(script)(), scheduler, step=10.0
    )
    assert items == ["order 1"]  # nothing yielded twice: no second opening re-yields it
    assert ended is fault
    assert script.calls == 1


async def test_cancelling_during_a_backoff_restarts_nothing() -> None:
    scheduler = TestScheduler()
    script = Script(([], unreachable_error()), (["a"], None))
    retries: list[float] = []
    orders = retry_transient_connect_async(
        on_retry=lambda error, attempt, delay: retries.append(delay), scheduler=scheduler
    )(script)

    async def run() -> list[str]:
        return [item async for item in orders()]

    task = asyncio.ensure_future(run())
    await run_until(lambda: retries == [0.25])  # the first fault judged; the wait has begun
    assert script.closed == 1  # the failed opening is closed before the wait
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    scheduler.advance_by(10.0)  # long past every delay
    await asyncio.sleep(0)
    assert script.calls == 1


async def test_without_a_fault_nothing_is_called_again() -> None:
    # Negative control of the retry itself: a clean end is an end.
    scheduler = TestScheduler()
    script = Script((["a"], None))
    items, ended = await consume(
        retry_transient_connect_async(scheduler=scheduler)(script)(), scheduler
    )
    assert (items, ended, script.calls) == (["a"], None, 1)


async def test_each_call_has_its_own_budget_and_keeps_its_arguments() -> None:
    scheduler = TestScheduler()
    script = Script(
        ([], unreachable_error()), (["first"], None), ([], unreachable_error()), (["again"], None)
    )

    @retry_transient_connect_async(delays=(1.0,), scheduler=scheduler)
    def orders(partition: str, *, limit: int) -> AsyncIterator[str]:
        return script(partition, limit)

    assert (await consume(orders("shop", limit=5), scheduler))[0] == ["first"]
    assert (await consume(orders("shop", limit=5), scheduler))[0] == ["again"]
    assert script.args == [("shop", 5)] * 4
    assert orders.__name__ == "orders"


async def test_the_classifier_raising_ends_the_iteration_with_that_exception() -> None:
    scheduler = TestScheduler()
    broken = RuntimeError("classifier broken")

    def should_retry(error: BaseException) -> bool:
        raise broken

    script = Script(([], unreachable_error()), (["a"], None))
    items, ended = await consume(
        retry_transient_connect_async(should_retry=should_retry, scheduler=scheduler)(script)(),
        scheduler,
    )
    assert (items, ended, script.calls) == ([], broken, 1)


async def test_leaving_the_loop_closes_the_current_generator() -> None:
    scheduler = TestScheduler()
    script = Script((["a", "b"], None))
    script.hang = True
    async with aclosing(retry_transient_connect_async(scheduler=scheduler)(script)()) as items:
        async for _ in items:
            break
    assert script.closed == 1


async def test_an_async_generator_function_decorated_directly() -> None:
    scheduler = TestScheduler()
    attempts: list[int] = []

    @retry_transient_connect_async(scheduler=scheduler)
    async def orders() -> AsyncIterator[int]:
        attempts.append(len(attempts) + 1)
        if len(attempts) < 3:
            raise unreachable_error()
        yield 1
        yield 2

    assert await consume(orders(), scheduler) == ([1, 2], None)
    assert attempts == [1, 2, 3]


def test_the_defaults_are_the_operators_defaults() -> None:
    rx = inspect.signature(retry_transient_connect).parameters
    aio = inspect.signature(retry_transient_connect_async).parameters
    assert list(rx) == list(aio)
    assert all(rx[name].default is aio[name].default for name in rx)
    assert aio["delays"].default == DEFAULT_RETRY_DELAYS == (0.25, 0.5, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"delays": (-1.0,)}, ValueError),
        ({"delays": "0.25"}, TypeError),
        ({"should_retry": 3}, TypeError),
        ({"on_retry": "log"}, TypeError),
    ],
)
def test_bad_arguments_are_refused_when_the_decorator_is_built(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        retry_transient_connect_async(**kwargs)  # type: ignore[arg-type]
