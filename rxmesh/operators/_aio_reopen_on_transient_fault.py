"""``reopen_on_transient_fault_async``: a standing watch written as ``async for``.

The asyncio counterpart of :func:`~rxmesh.operators.reopen_on_transient_fault`, with the same
:class:`~rxmesh.operators.ReopenLadder`: after a transient fault the factory is called
again (a fresh upstream every time), at most five times in a row without an item, waiting 2, 5,
15, 30, 60 s; any item resets the count. Items already yielded are never yielded again.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from typing import ParamSpec, TypeVar, overload

from reactivex import abc

from rxmesh.faults import is_standing_watch_transient
from rxmesh.operators._aio_drive import drive
from rxmesh.operators._ladder import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    NO_JITTER,
    OnReopen,
    Random,
    ReopenLadder,
    require_callable,
)

__all__ = ["reopen_on_transient_fault_async"]

P = ParamSpec("P")
T = TypeVar("T")


@overload
def reopen_on_transient_fault_async(
    open: Callable[[], AsyncIterable[T]],
    *,
    backoff: Sequence[float] = ...,
    max_consecutive: int = ...,
    is_transient: Callable[[BaseException], bool] = ...,
    on_reopen: OnReopen | None = ...,
    jitter: float = ...,
    random: Random | None = ...,
    scheduler: abc.SchedulerBase | None = ...,
) -> AsyncIterator[T]: ...


@overload
def reopen_on_transient_fault_async(
    open: None = None,
    *,
    backoff: Sequence[float] = ...,
    max_consecutive: int = ...,
    is_transient: Callable[[BaseException], bool] = ...,
    on_reopen: OnReopen | None = ...,
    jitter: float = ...,
    random: Random | None = ...,
    scheduler: abc.SchedulerBase | None = ...,
) -> Callable[[Callable[P, AsyncIterable[T]]], Callable[P, AsyncIterator[T]]]: ...


def reopen_on_transient_fault_async(
    open: Callable[[], AsyncIterable[T]] | None = None,  # the factory, passed as ``open=``
    *,
    backoff: Sequence[float] = DEFAULT_REOPEN_BACKOFF,
    max_consecutive: int = DEFAULT_MAX_CONSECUTIVE_REOPENS,
    is_transient: Callable[[BaseException], bool] = is_standing_watch_transient,
    on_reopen: OnReopen | None = None,
    jitter: float = NO_JITTER,
    random: Random | None = None,
    scheduler: abc.SchedulerBase | None = None,
) -> AsyncIterator[T] | Callable[[Callable[P, AsyncIterable[T]]], Callable[P, AsyncIterator[T]]]:
    """A standing watch over ``open()`` that re-opens after a transient fault, and only then.

    Given a factory, returns the watch's async iterator; without one, a decorator for an
    async-generator function (each call of it is one watch). On a fault ``f`` of an opening:
    ``n = (0 if this opening yielded anything else the previous n) + 1``; if
    ``not is_transient(f)`` or ``n > max_consecutive`` the ``async for`` raises ``f`` unchanged
    (the same object); otherwise ``on_reopen(f, n, delay)`` runs before waiting
    ``delay = backoff[min(n, len(backoff)) - 1]``, then the factory is called again. A factory
    that raises counts as a fault of that opening. If ``is_transient`` or ``on_reopen`` raises,
    that exception ends the watch. The end of the iterable ends the watch; cancelling during a
    wait re-opens nothing; leaving the loop closes the current iterator.

    Args:
        open: the factory of the watched async iterable (``None``: use as a decorator).
        backoff: seconds before the 1st, 2nd, ... consecutive re-open; must not be empty.
        max_consecutive: re-opens allowed in a row without an item (0 = never re-open).
        is_transient: the classifier; :func:`rxmesh.faults.is_standing_watch_transient`.
        on_reopen: called as ``on_reopen(fault, n, delay)`` before each wait. A WARNING is
            logged too.
        jitter: up to that fraction of each delay added at random (0, the default: the
            delays exactly); ``random``: the source of the draws (``random.random``).
        scheduler: where the waits run (virtual time on a ``TestScheduler``); else
            ``asyncio.sleep`` on the running loop.

    Raises:
        TypeError: a non-callable ``open``/``is_transient``/``on_reopen``, a non-int
            ``max_consecutive``, or ``backoff`` not numbers.
        ValueError: an empty ``backoff``, a negative or non-finite delay, ``max_consecutive < 0``.

    Example:
        >>> from rxmesh.aio import reopen_on_transient_fault_async
        >>> @reopen_on_transient_fault_async(backoff=(1, 2))
        ... async def census():
        ...     yield "reading"
    """
    require_callable("open", open, optional=True)
    schedule = ReopenLadder.of(
        backoff,
        max_consecutive=max_consecutive,
        is_transient=is_transient,
        on_reopen=on_reopen,
        jitter=jitter,
        random=random,
    )

    def watch(factory: Callable[[], AsyncIterable[T]]) -> AsyncIterator[T]:
        return drive(factory, schedule.decider(), scheduler)  # each watch its own count

    if open is not None:
        return watch(open)

    def decorate(func: Callable[P, AsyncIterable[T]]) -> Callable[P, AsyncIterator[T]]:
        require_callable("the decorated object", func)

        @functools.wraps(func)
        def watched(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
            return watch(lambda: func(*args, **kwargs))

        return watched

    return decorate
