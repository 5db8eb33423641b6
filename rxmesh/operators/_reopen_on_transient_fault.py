"""``reopen_on_transient_fault``: a standing watch is its own caller.

A one-shot read has a next caller; a standing watch does not. After a transient fault it re-opens
through its factory (a fresh upstream every time) on a bounded ladder, and only after a transient
fault: re-reading a defect would only repeat it on a timer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from reactivex import Observable, abc

from rxmesh.faults import is_standing_watch_transient
from rxmesh.operators._ladder import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    NO_JITTER,
    OnReopen,
    Random,
    ReopenLadder,
    require_callable,
)
from rxmesh.operators._resubscribe import resubscribing

__all__ = [
    "DEFAULT_MAX_CONSECUTIVE_REOPENS",
    "DEFAULT_REOPEN_BACKOFF",
    "reopen_on_transient_fault",
]

_T = TypeVar("_T")


def reopen_on_transient_fault(
    open: Callable[[], Observable[_T]],  # the factory, passed as ``open=``
    *,
    backoff: Sequence[float] = DEFAULT_REOPEN_BACKOFF,
    max_consecutive: int = DEFAULT_MAX_CONSECUTIVE_REOPENS,
    is_transient: Callable[[BaseException], bool] = is_standing_watch_transient,
    on_reopen: OnReopen | None = None,
    jitter: float = NO_JITTER,
    random: Random | None = None,
    scheduler: abc.SchedulerBase | None = None,
) -> Observable[_T]:
    """A standing watch over ``open()`` that re-opens after a transient fault, and only then.

    ``open`` is called at subscribe and again for every re-open, so each re-open reads a fresh
    upstream (a factory handing back one cached observable that latched the fault defeats this).
    On a fault ``f``: ``n = (0 if this opening emitted anything else the previous n) + 1``. If
    ``not is_transient(f)`` or ``n > max_consecutive`` the watch ends with ``f`` unchanged (the
    same object). Otherwise ``on_reopen(f, n, delay)`` runs before waiting
    ``delay = backoff[min(n, len(backoff)) - 1]``, then the factory is called again. Completion
    completes the watch; disposal cancels a pending backoff. A factory that raises counts as a
    fault of that opening and is judged the same way. If ``is_transient`` or ``on_reopen``
    raises, that exception ends the watch instead (no re-open is scheduled).

    Args:
        open: the factory of the watched observable.
        backoff: seconds before the 1st, 2nd, ... consecutive re-open; must not be empty.
        max_consecutive: re-opens allowed in a row without an emission (0 = never re-open).
        is_transient: the classifier; :func:`rxmesh.faults.is_standing_watch_transient`.
        on_reopen: called as ``on_reopen(fault, n, delay)`` before each wait; the owner records
            the interruption on its health registry there. A WARNING is logged too.
        jitter: up to that fraction of each delay added at random (0, the default: the
            delays exactly); ``random``: the source of the draws (``random.random``).
        scheduler: where the backoff timers run; else the subscription's scheduler, else the
            running asyncio loop, else a thread timer (see :mod:`rxmesh._util.scheduling`).

    Raises:
        TypeError: a non-callable ``open``/``is_transient``/``on_reopen``, a non-int
            ``max_consecutive``, or ``backoff`` not numbers.
        ValueError: an empty ``backoff``, a negative or non-finite delay, ``max_consecutive < 0``.

    Example:
        >>> import reactivex
        >>> from rxmesh.operators import reopen_on_transient_fault
        >>> reopen_on_transient_fault(lambda: reactivex.of("census")).run()
        'census'
    """
    require_callable("open", open)
    schedule = ReopenLadder.of(
        backoff,
        max_consecutive=max_consecutive,
        is_transient=is_transient,
        on_reopen=on_reopen,
        jitter=jitter,
        random=random,
    )

    def opened() -> abc.ObservableBase[_T]:
        source = open()
        if not isinstance(source, abc.ObservableBase):
            raise TypeError(f"open() must return an observable, got {type(source).__name__}")
        return source

    return resubscribing(opened, schedule.decider, scheduler)
