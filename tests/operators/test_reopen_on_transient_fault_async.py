"""``reopen_on_transient_fault_async``: a standing watch written as ``async for``.

The schedule is the operator's own (5 in a row, 2/5/15/30/60 s, reset by any item), driven on a
``TestScheduler``; the negative controls are the operator's: a defect ends the watch at once,
cancelling during a backoff re-opens nothing, nothing yielded is yielded twice.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import pytest
from reactivex.testing import TestScheduler

from rxmesh.aio import reopen_on_transient_fault_async
from rxmesh.exceptions import MeshDisposedError
from rxmesh.operators import reopen_on_transient_fault
from tests.operators._shared import Script, connect_fault, consume, run_until


async def test_a_dead_store_is_re_opened_five_times_on_the_default_backoff_then_surfaces() -> None:
    scheduler = TestScheduler()
    faults = [connect_fault() for _ in range(6)]
    script = Script(*[([], fault) for fault in faults])
    reopens: list[tuple[int, float, float]] = []
    watch = reopen_on_transient_fault_async(
        script,
        on_reopen=lambda fault, n, delay: reopens.append((n, delay, scheduler.clock)),
        scheduler=scheduler,
    )
    items, ended = await consume(watch, scheduler, step=0.5)
    assert items == []
    assert ended is faults[-1]  # the 6th fault, the same object
    assert script.calls == 6
    assert [(n, delay) for n, delay, _ in reopens] == [(1, 2), (2, 5), (3, 15), (4, 30), (5, 60)]
    assert scheduler.clock == pytest.approx(112, abs=0.6)  # 2 + 5 + 15 + 30 + 60


async def test_an_item_resets_the_count_and_nothing_is_yielded_twice() -> None:
    scheduler = TestScheduler()
    ending = MeshDisposedError("the owner disposed the mesh")
    script = Script(
        ([], connect_fault()),
        (["initial 1"], connect_fault()),  # an item: the next re-open is n=1 again
        (["initial 2", "delta"], ending),
    )
    reopens: list[tuple[int, float]] = []
    watch = reopen_on_transient_fault_async(
        script, on_reopen=lambda f, n, delay: reopens.append((n, delay)), scheduler=scheduler
    )
    items, ended = await consume(watch, scheduler, step=0.5)
    assert items == ["initial 1", "initial 2", "delta"]  # each item once, in order
    assert ended is ending  # not transient: the watch ends with it
    assert reopens == [(1, 2), (1, 2)]


async def test_a_defect_ends_the_watch_at_once() -> None:
    scheduler = TestScheduler()
    defect = KeyError("schema")
    script = Script((["reading"], defect), (["never"], None))
    items, ended = await consume(
        reopen_on_transient_fault_async(script, scheduler=scheduler), scheduler, step=10.0
    )
    assert (items, ended, script.calls) == (["reading"], defect, 1)


async def test_cancelling_during_a_backoff_re_opens_nothing() -> None:
    scheduler = TestScheduler()
    script = Script((["reading"], connect_fault()), (["never"], None))
    reopens: list[int] = []
    watch = reopen_on_transient_fault_async(
        script, on_reopen=lambda f, n, delay: reopens.append(n), scheduler=scheduler
    )

    async def run() -> list[str]:
        return [item async for item in watch]

    task = asyncio.ensure_future(run())
    await run_until(lambda: reopens == [1])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    scheduler.advance_by(100.0)
    await asyncio.sleep(0)
    assert script.calls == 1
    assert script.closed == 1


async def test_a_factory_that_raises_is_a_fault_of_that_opening() -> None:
    scheduler = TestScheduler()
    calls: list[int] = []

    def open_census() -> AsyncIterator[str]:
        calls.append(1)
        if len(calls) == 1:
            raise connect_fault()
        return Script((["reading"], None))()

    items, ended = await consume(
        reopen_on_transient_fault_async(open_census, scheduler=scheduler), scheduler, step=0.5
    )
    assert (items, ended, len(calls)) == (["reading"], None, 2)


async def test_the_end_of_the_stream_ends_the_watch_and_max_zero_never_re_opens() -> None:
    scheduler = TestScheduler()
    done = Script((["a"], None))
    assert await consume(reopen_on_transient_fault_async(done, scheduler=scheduler), scheduler) == (
        ["a"],
        None,
    )
    assert done.calls == 1
    fault = connect_fault()
    never = Script(([], fault))
    watch = reopen_on_transient_fault_async(never, max_consecutive=0, scheduler=scheduler)
    assert await consume(watch, scheduler) == ([], fault)


async def test_the_hook_raising_ends_the_watch_with_that_exception() -> None:
    scheduler = TestScheduler()
    broken = RuntimeError("health registry broken")

    def on_reopen(fault: BaseException, n: int, delay: float) -> None:
        raise broken

    script = Script(([], connect_fault()), (["a"], None))
    watch = reopen_on_transient_fault_async(script, on_reopen=on_reopen, scheduler=scheduler)
    assert await consume(watch, scheduler) == ([], broken)
    assert script.calls == 1


async def test_as_a_decorator_each_call_is_one_watch_with_its_own_count() -> None:
    scheduler = TestScheduler()
    openings: list[str] = []

    @reopen_on_transient_fault_async(backoff=(1,), max_consecutive=1, scheduler=scheduler)
    async def census(name: str) -> AsyncIterator[str]:
        openings.append(name)
        if len(openings) % 2:
            raise connect_fault()
        yield f"{name} reading"

    assert await consume(census("a"), scheduler) == (["a reading"], None)
    assert await consume(census("b"), scheduler) == (["b reading"], None)
    assert openings == ["a", "a", "b", "b"]
    assert census.__name__ == "census"


def test_the_defaults_are_the_operators_defaults() -> None:
    rx = inspect.signature(reopen_on_transient_fault).parameters
    aio = inspect.signature(reopen_on_transient_fault_async).parameters
    assert list(rx) == list(aio)
    assert all(rx[name].default is aio[name].default for name in rx if name != "open")
    assert aio["backoff"].default == (2, 5, 15, 30, 60)
    assert aio["max_consecutive"].default == 5


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"backoff": ()}, ValueError),
        ({"backoff": (float("inf"),)}, ValueError),
        ({"max_consecutive": -1}, ValueError),
        ({"max_consecutive": True}, TypeError),
        ({"is_transient": None}, TypeError),
        ({"on_reopen": 1}, TypeError),
        ({"open": "census"}, TypeError),
    ],
)
def test_bad_arguments_are_refused_when_the_watch_is_built(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        reopen_on_transient_fault_async(**kwargs)  # type: ignore[call-overload]
