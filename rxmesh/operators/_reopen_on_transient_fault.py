"""``reopen_on_transient_fault``: a standing watch is its own caller.

A one-shot read has a next caller; a standing watch does not. After a transient fault it re-opens
through its factory (a fresh upstream every time) on a bounded ladder, and only after a transient
fault: re-reading a defect would only repeat it on a timer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import (
    CompositeDisposable,
    Disposable,
    SerialDisposable,
    SingleAssignmentDisposable,
)

from rxmesh._util.scheduling import resolve_scheduler
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
from rxmesh.operators._sink import direct_sink

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

    def subscribe(
        observer: abc.ObserverBase[_T], subscribe_scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        # Per-subscription state: each watch has its own count and its own "emitted" flag.
        consecutive = 0
        emitted = False  # by the current opening
        disposed = False
        upstream = SerialDisposable()
        timer = SerialDisposable()
        # The subscriber's own function behind the stopped check its AutoDetachObserver makes:
        # this call replaces that one instead of adding to it (rxmesh/operators/_sink.py).
        owner, sink = direct_sink(observer)

        def on_next(value: _T) -> None:
            nonlocal emitted
            if owner.is_stopped:
                return
            emitted = True
            sink(value)

        def on_error(fault: Exception) -> None:
            nonlocal consecutive
            if disposed:
                return
            try:
                consecutive, delay = schedule.step(fault, consecutive, emitted=emitted)
            except Exception as defect:  # noqa: BLE001 - forwarded: classifier or hook broken
                observer.on_error(defect)
                return
            if delay is None:
                observer.on_error(fault)
                return
            if disposed:  # on_reopen may have disposed the watch
                return
            when = resolve_scheduler(scheduler, subscribe_scheduler)
            # A timer takes its slot before it is set: a thread timer can fire, its opening fail
            # and set the next timer before ``schedule_relative`` returns; this handle stored after
            # that would cancel the next one.
            wait = SingleAssignmentDisposable()
            timer.disposable = wait
            wait.disposable = when.schedule_relative(delay, reopen)

        def reopen(_: abc.SchedulerBase, __: Any = None) -> None:
            if not disposed:
                open_once()

        def open_once() -> None:
            nonlocal emitted
            emitted = False
            try:
                source = open()
                if not isinstance(source, abc.ObservableBase):
                    raise TypeError(
                        f"open() must return an observable, got {type(source).__name__}"
                    )
            except Exception as exc:  # noqa: BLE001 - not swallowed: a fault of this opening, judged
                on_error(exc)
                return
            # Each opening takes its slot before the subscribe call: an opening that fails inside
            # that call can be re-opened before the call returns (a zero delay on a synchronous
            # scheduler or a thread timer), and then the newer opening owns ``upstream``; storing
            # the older one after it would dispose the live one.
            opening = SingleAssignmentDisposable()
            upstream.disposable = opening
            opening.disposable = source.subscribe(
                on_next, on_error, observer.on_completed, scheduler=subscribe_scheduler
            )

        def dispose() -> None:
            nonlocal disposed
            disposed = True

        # ``disposed`` is set first, so a timer racing the disposal never re-opens.
        subscription = CompositeDisposable(Disposable(dispose), timer, upstream)
        open_once()
        return subscription

    return Observable(subscribe)
