"""``first_value``: the first item, the error unchanged, the end as LookupError, the timeout;
and an error it raises leaves no reference cycle behind.

Before the fix, the awaited future sat in a closure cell of ``first_value``'s frame, which the
raised error's traceback holds, and the future held the error: every error delivered through
``first_value`` was freed only by the cyclic garbage collector (with the frames, tracebacks
and observers of the whole delivery). The two cycle tests fail against 345a4c7; the control
builds the same shape by hand and is seen as a cycle.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable

import pytest
import reactivex

from rxmesh.aio import first_value, from_async


class _Refused(Exception):
    pass


async def _left_for_the_collector(action: Callable[[], Awaitable[None]]) -> int:
    """How many ``_Refused`` errors only the cyclic collector could free after ``action``
    (which catches them with ``except``: ``pytest.raises`` keeps a traceback of its own)."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await action()
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
        return sum(isinstance(o, _Refused) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def _fails() -> int:
    raise _Refused("no")


@pytest.mark.parametrize("timeout", [None, 5.0])
async def test_an_error_through_first_value_leaves_no_cycle(timeout: float | None) -> None:
    async def action() -> None:
        # Sources that make their error when subscribed (``reactivex.throw(error)`` holds the
        # one it is given, so the caller's own frame would close a cycle through it).
        fresh = reactivex.defer(lambda _: reactivex.throw(_Refused("no")))
        for source in (fresh, from_async(_fails)):
            try:
                await first_value(source, timeout=timeout)
            except _Refused:
                continue
            raise AssertionError("no error")

    assert await _left_for_the_collector(action) == 0


async def test_control_a_future_held_by_the_frame_it_raised_in_is_a_cycle() -> None:
    async def holding() -> None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_exception(_Refused("no"))
        await future

    async def action() -> None:
        try:
            await holding()
        except _Refused:
            return
        raise AssertionError("no error")

    assert await _left_for_the_collector(action) >= 1


async def test_first_value_answers_as_before() -> None:
    assert await first_value(reactivex.of(1, 2)) == 1
    assert await first_value(reactivex.of(3), timeout=1) == 3
    with pytest.raises(LookupError):
        await first_value(reactivex.empty())
    with pytest.raises(_Refused):
        await first_value(from_async(_fails), timeout=1)
    with pytest.raises(TimeoutError):
        await first_value(reactivex.never(), timeout=0)  # due at once: no wall-clock wait


async def test_a_late_item_after_first_value_returned_is_ignored() -> None:
    """The observer outlives the call (a source that ignores dispose); it must not raise."""
    observers: list[reactivex.abc.ObserverBase[int]] = []

    def subscribe(observer: reactivex.abc.ObserverBase[int], _: object = None) -> object:
        observers.append(observer)
        observer.on_next(1)
        return reactivex.disposable.Disposable()

    assert await first_value(reactivex.create(subscribe)) == 1  # type: ignore[arg-type]
    observers[0].on_next(2)
    observers[0].on_error(_Refused("late"))
    observers[0].on_completed()
