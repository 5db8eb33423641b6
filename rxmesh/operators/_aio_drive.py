"""The one loop behind the ladders' asyncio drivers: open, yield, and on a fault ask the rule.

:func:`drive` holds no rule of its own. It opens the async iterable, yields every item exactly
once, and when an opening fails it asks ``decide(fault, emitted)`` — one run's
:meth:`Ladder.decider <rxmesh.operators.Ladder.decider>` or
:meth:`ReopenLadder.decider <rxmesh.operators.ReopenLadder.decider>` — for the delay before the
next opening, or ``None`` to raise the fault itself, unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TypeVar

from reactivex import abc

from rxmesh.operators._ladder import Decide, scheduler_sleep

__all__ = ["drive"]

T = TypeVar("T")


@dataclass(slots=True)
class _Ending:
    emitted: bool = False
    fault: Exception | None = None


async def drive(
    open: Callable[[], AsyncIterable[T]],
    decide: Decide,
    scheduler: abc.SchedulerBase | None,
) -> AsyncIterator[T]:
    """Yield the items of ``open()``, opening it again whenever ``decide`` returns a delay.

    Only ``Exception`` raised by the factory or by the iterator's ``__anext__`` is a fault of the
    opening; ``CancelledError`` and ``GeneratorExit`` pass through, and the current iterator is
    closed (``aclose``) before anything else happens, including the wait.
    """
    while True:
        ending = _Ending()
        async with aclosing(_opening(open, ending)) as items:
            async for item in items:
                yield item
        fault = ending.fault
        if fault is None:
            return
        delay = decide(fault, ending.emitted)
        if delay is None:
            raise fault
        await scheduler_sleep(scheduler, delay)


async def _opening(
    open: Callable[[], AsyncIterable[T]], ending: _Ending
) -> AsyncGenerator[T, None]:
    try:
        iterator = aiter(open())
    except Exception as fault:  # noqa: BLE001 - not swallowed: the fault of this opening, judged
        ending.fault = fault
        return
    try:
        while True:
            try:
                item = await anext(iterator)
            except StopAsyncIteration:
                return
            except Exception as fault:  # noqa: BLE001 - not swallowed: judged by the driver
                ending.fault = fault
                return
            ending.emitted = True
            yield item
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
