"""``retry_transient_connect``: the first rung of the ladder.

Retry once, then answer: a cold source that fails to reach its store before emitting anything is
resubscribed after each delay of a short ladder; the last error then surfaces unchanged to the
consumer's terminal arm, which classifies and answers and never retries again.
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
from rxmesh.faults import is_transient_connect_fault
from rxmesh.operators._ladder import DEFAULT_RETRY_DELAYS, NO_JITTER, Ladder, OnRetry, Random
from rxmesh.operators._sink import direct_sink

__all__ = ["DEFAULT_RETRY_DELAYS", "retry_transient_connect"]

_T = TypeVar("_T")


def retry_transient_connect(
    delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
    *,
    should_retry: Callable[[BaseException], bool] = is_transient_connect_fault,
    on_retry: OnRetry | None = None,
    jitter: float = NO_JITTER,
    random: Random | None = None,
    scheduler: abc.SchedulerBase | None = None,
) -> Callable[[Observable[_T]], Observable[_T]]:
    """Resubscribe a cold source after a transient connect fault, only before its first item.

    The "emitted" flag belongs to each downstream subscription and is never reset: after the
    first item a fault propagates at once (a resubscribe would mint a second Initial into a merge
    that has already counted this source). At most ``len(delays)`` resubscriptions, waiting
    ``delays[i]`` before the i-th. Giving up (not retryable, already emitted, budget spent) calls
    ``on_error`` with the last error, the very same object. If ``should_retry`` or ``on_retry``
    raises, that exception ends the stream instead (no retry is scheduled).

    Args:
        delays: seconds to wait before each resubscription. Empty means "never retry".
        should_retry: the classifier; the one rule of :mod:`rxmesh.faults` by default.
        on_retry: called as ``on_retry(error, attempt, delay)`` once per scheduled retry,
            before the wait (``attempt`` counts from 1). A WARNING is logged there too.
        jitter: up to that fraction of each delay added at random (0, the default: the
            delays exactly); ``random``: the source of the draws (``random.random``).
        scheduler: where the backoff timers run; else the subscription's scheduler, else the
            running asyncio loop, else a thread timer (see :mod:`rxmesh._util.scheduling`).

    Raises:
        TypeError: a non-callable ``should_retry``/``on_retry``, or ``delays`` not numbers.
        ValueError: a negative or non-finite delay.

    Example:
        >>> import reactivex
        >>> from rxmesh.operators import retry_transient_connect
        >>> reactivex.of(1, 2).pipe(retry_transient_connect()).run()
        2
    """
    ladder = Ladder.of(
        delays, should_retry=should_retry, on_retry=on_retry, jitter=jitter, random=random
    )

    def _retry(source: Observable[_T]) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], subscribe_scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            # Per-subscription state: a retry budget shared across subscriptions is a bug.
            emitted = False
            disposed = False
            attempt = 0
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

            def on_error(error: Exception) -> None:
                nonlocal attempt
                if disposed:
                    return
                try:
                    delay = ladder.step(error, attempt, emitted=emitted)
                except Exception as defect:  # noqa: BLE001 - forwarded: classifier or hook broken
                    observer.on_error(defect)
                    return
                if delay is None:
                    observer.on_error(error)
                    return
                attempt += 1
                if disposed:  # on_retry may have disposed the subscription
                    return
                when = resolve_scheduler(scheduler, subscribe_scheduler)
                # A timer takes its slot before it is set: a thread timer can fire, its
                # opening fail and set the next timer before ``schedule_relative`` returns;
                # this handle stored after that would cancel the next one.
                wait = SingleAssignmentDisposable()
                timer.disposable = wait
                wait.disposable = when.schedule_relative(delay, resubscribe)

            def resubscribe(_: abc.SchedulerBase, __: Any = None) -> None:
                if not disposed:
                    subscribe_upstream()

            def subscribe_upstream() -> None:
                # Each subscription takes its slot before the subscribe call: a source that fails
                # inside that call can be resubscribed before the call returns (a zero delay on a
                # synchronous scheduler or a thread timer), and then the newer subscription owns
                # ``upstream``; storing the older one after it would dispose the live one.
                opening = SingleAssignmentDisposable()
                upstream.disposable = opening
                opening.disposable = source.subscribe(
                    on_next, on_error, observer.on_completed, scheduler=subscribe_scheduler
                )

            def dispose() -> None:
                nonlocal disposed
                disposed = True

            # ``disposed`` is set first, so a timer racing the disposal never resubscribes.
            subscription = CompositeDisposable(Disposable(dispose), timer, upstream)
            subscribe_upstream()
            return subscription

        return Observable(subscribe)

    return _retry
