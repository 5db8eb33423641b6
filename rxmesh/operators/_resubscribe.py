"""The one subscription loop behind the two Rx ladder operators: open, deliver, and on a fault ask
the rule when to open again.

:func:`resubscribing` holds no rule of its own. Each subscription opens ``open()``, hands every
item to the subscriber, and when an opening fails it asks ``decide(fault, emitted)`` — that
subscription's :meth:`Ladder.decider <rxmesh.operators.Ladder.decider>` or
:meth:`ReopenLadder.decider <rxmesh.operators.ReopenLadder.decider>` — for the delay before the
next opening, or ``None`` to end with the fault itself, unchanged. The asyncio counterpart is
``_aio_drive``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import (
    CompositeDisposable,
    Disposable,
    SerialDisposable,
    SingleAssignmentDisposable,
)

from rxmesh._util.scheduling import resolve_scheduler
from rxmesh.operators._ladder import Decide
from rxmesh.operators._sink import direct_sink

__all__ = ["resubscribing"]

_T = TypeVar("_T")


def resubscribing(
    open: Callable[[], abc.ObservableBase[_T]],
    decider: Callable[[], Decide],
    scheduler: abc.SchedulerBase | None,
) -> Observable[_T]:
    """An observable that subscribes to ``open()`` and, after each fault ``decider()``'s rule
    answers with a delay, waits that long on ``scheduler`` and subscribes to ``open()`` again.

    Per subscription: one ``decide = decider()`` (its own count), and ``emitted`` says whether
    the current opening delivered anything. An ``Exception`` raised by ``open()`` is a fault of
    that opening, judged the same way. If ``decide`` raises, that exception ends the stream
    (nothing is scheduled). Completion completes the stream; disposal cancels a pending wait, and
    a wait that fires after it opens nothing.
    """

    def subscribe(
        observer: abc.ObserverBase[_T], subscribe_scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        decide = decider()  # per subscription: a count shared across subscriptions is a bug
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
            if disposed:
                return
            try:
                delay = decide(fault, emitted)
            except Exception as defect:  # noqa: BLE001 - forwarded: classifier or hook broken
                observer.on_error(defect)
                return
            if delay is None:
                observer.on_error(fault)
                return
            if disposed:  # the rule's hook may have disposed the subscription
                return
            when = resolve_scheduler(scheduler, subscribe_scheduler)
            # A timer takes its slot before it is set: a thread timer can fire, its opening fail
            # and set the next timer before ``schedule_relative`` returns; this handle stored after
            # that would cancel the next one.
            wait = SingleAssignmentDisposable()
            timer.disposable = wait
            wait.disposable = when.schedule_relative(delay, again)

        def again(_: abc.SchedulerBase, __: Any = None) -> None:
            if not disposed:
                open_once()

        def open_once() -> None:
            nonlocal emitted
            emitted = False
            try:
                source = open()
            except Exception as exc:  # noqa: BLE001 - not swallowed: a fault of this opening, judged
                on_error(exc)
                return
            # Each opening takes its slot before the subscribe call: an opening that fails inside
            # that call can be opened again before the call returns (a zero delay on a synchronous
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

        # ``disposed`` is set first, so a timer racing the disposal never opens again.
        subscription = CompositeDisposable(Disposable(dispose), timer, upstream)
        open_once()
        return subscription

    return Observable(subscribe)
