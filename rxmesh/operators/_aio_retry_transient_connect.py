"""``retry_transient_connect_async``: the first rung of the ladder for async iterators.

The asyncio counterpart of :func:`~rxmesh.operators.retry_transient_connect`, with the same
:class:`~rxmesh.operators.Ladder`: an async-generator function (or any callable returning
an async iterable) that fails to reach its store before yielding anything is called again after
each delay; after its first item a fault propagates at once, so nothing is yielded twice.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import ParamSpec, TypeVar

from reactivex import abc

from rxmesh.faults import is_transient_connect_fault
from rxmesh.operators._aio_drive import drive
from rxmesh.operators._ladder import (
    DEFAULT_RETRY_DELAYS,
    NO_JITTER,
    Ladder,
    OnRetry,
    Random,
    require_callable,
)

__all__ = ["retry_transient_connect_async"]

P = ParamSpec("P")
T = TypeVar("T")


def retry_transient_connect_async(
    delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
    *,
    should_retry: Callable[[BaseException], bool] = is_transient_connect_fault,
    on_retry: OnRetry | None = None,
    jitter: float = NO_JITTER,
    random: Random | None = None,
    scheduler: abc.SchedulerBase | None = None,
) -> Callable[[Callable[P, AsyncIterable[T]]], Callable[P, AsyncIterator[T]]]:
    """A decorator: call the async-generator function again after a transient connect fault,
    only before its first item.

    Each call of the decorated function is one iteration with its own budget: at most
    ``len(delays)`` new calls (with the same arguments), waiting ``delays[i]`` before the i-th.
    Giving up (not retryable, already yielded, budget spent) raises the last error, the very same
    object, at the ``async for``. If ``should_retry`` or ``on_retry`` raises, that exception ends
    the iteration instead. Cancelling during a wait cancels it, and nothing is called again;
    leaving the loop closes the current iterator (``aclose``).

    Args:
        delays: seconds to wait before each new call. Empty means "never retry".
        should_retry: the classifier; the one rule of :mod:`rxmesh.faults` by default.
        on_retry: called as ``on_retry(error, attempt, delay)`` once per scheduled retry, before
            the wait (``attempt`` counts from 1). A WARNING is logged there too.
        jitter: up to that fraction of each delay added at random (0, the default: the
            delays exactly); ``random``: the source of the draws (``random.random``).
        scheduler: where the waits run (virtual time on a ``TestScheduler``); else
            ``asyncio.sleep`` on the running loop.

    Raises:
        TypeError: a non-callable ``should_retry``/``on_retry``, or ``delays`` not numbers.
        ValueError: a negative or non-finite delay.

    Example:
        >>> from rxmesh.aio import retry_transient_connect_async
        >>> @retry_transient_connect_async()
        ... async def orders():
        ...     yield "order 1"
    """
    ladder = Ladder.of(
        delays, should_retry=should_retry, on_retry=on_retry, jitter=jitter, random=random
    )

    def decorate(func: Callable[P, AsyncIterable[T]]) -> Callable[P, AsyncIterator[T]]:
        require_callable("the decorated object", func)

        @functools.wraps(func)
        def iterate(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
            # Each iteration its own budget (a fresh decider).
            return drive(lambda: func(*args, **kwargs), ladder.decider(), scheduler)

        return iterate

    return decorate
