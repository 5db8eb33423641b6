"""``retry_transient_connect``: the first rung of the ladder (SPEC §2).

Retry once, then answer: a cold source that fails to reach its store BEFORE emitting anything is
resubscribed after each delay of a short ladder; the last error then surfaces unchanged to the
consumer's terminal arm, which classifies and answers and never retries again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable

from rxmesh._scheduling import resolve_scheduler
from rxmesh.faults import is_transient_connect_fault

__all__ = ["DEFAULT_RETRY_DELAYS", "retry_transient_connect"]

_T = TypeVar("_T")

DEFAULT_RETRY_DELAYS: tuple[float, ...] = (0.25, 0.5, 1.0)
"""Seconds waited before each resubscription: four subscriptions at most, 1.75 s of budget."""

OnRetry = Callable[[BaseException, int, float], object]
"""``on_retry(error, attempt, delay)``: ``attempt`` counts retries from 1."""


def validate_ladder(name: str, ladder: Sequence[float], *, allow_empty: bool) -> tuple[float, ...]:
    """Return ``ladder`` as a tuple of floats, refusing what no timer can wait (shared helper).

    Raises:
        TypeError: ``ladder`` is not a sequence of real numbers.
        ValueError: a delay is negative or not finite, or the ladder is empty where one is needed.
    """
    if isinstance(ladder, str | bytes) or not isinstance(ladder, Sequence):
        raise TypeError(f"{name} must be a sequence of seconds, got {type(ladder).__name__}")
    result: list[float] = []
    for step in ladder:
        if isinstance(step, bool) or not isinstance(step, int | float):
            raise TypeError(f"{name} must hold numbers of seconds, got {step!r}")
        seconds = float(step)
        if not seconds >= 0.0 or seconds == float("inf"):
            raise ValueError(f"{name} must hold finite delays >= 0 seconds, got {step!r}")
        result.append(seconds)
    if not result and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    return tuple(result)


def require_callable(name: str, value: object, *, optional: bool = False) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``value`` is callable (or optional ``None``)."""
    if value is None and optional:
        return
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")


def retry_transient_connect(
    delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
    *,
    should_retry: Callable[[BaseException], bool] = is_transient_connect_fault,
    on_retry: OnRetry | None = None,
    scheduler: abc.SchedulerBase | None = None,
) -> Callable[[Observable[_T]], Observable[_T]]:
    """Resubscribe a cold source after a transient connect fault, only before its first item.

    The "emitted" flag belongs to each downstream subscription and is never reset: after the
    first item a fault propagates at once (a resubscribe would mint a second Initial into a merge
    that has already counted this source). At most ``len(delays)`` resubscriptions, waiting
    ``delays[i]`` before the i-th. Giving up (not retryable, already emitted, budget spent) calls
    ``on_error`` with the LAST error, the very same object. If ``should_retry`` or ``on_retry``
    raises, that exception ends the stream instead (no retry is scheduled).

    Args:
        delays: seconds to wait before each resubscription. Empty means "never retry".
        should_retry: the classifier; the one rule of :mod:`rxmesh.faults` by default.
        on_retry: called as ``on_retry(error, attempt, delay)`` once per scheduled retry,
            before the wait (``attempt`` counts from 1). A WARNING is logged there too.
        scheduler: where the backoff timers run; else the subscription's scheduler, else the
            running asyncio loop, else a thread timer (see :mod:`rxmesh._scheduling`).

    Raises:
        TypeError: a non-callable ``should_retry``/``on_retry``, or ``delays`` not numbers.
        ValueError: a negative or non-finite delay.

    Example:
        >>> import reactivex
        >>> from rxmesh.operators import retry_transient_connect
        >>> reactivex.of(1, 2).pipe(retry_transient_connect()).run()
        2
    """
    ladder = validate_ladder("delays", delays, allow_empty=True)
    require_callable("should_retry", should_retry)
    require_callable("on_retry", on_retry, optional=True)

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
            forward_next = observer.on_next

            def on_next(value: _T) -> None:
                nonlocal emitted
                emitted = True
                forward_next(value)

            def on_error(error: Exception) -> None:
                nonlocal attempt
                if disposed:
                    return
                try:
                    give_up = emitted or attempt >= len(ladder) or not should_retry(error)
                except Exception as defect:  # noqa: BLE001 - forwarded: the classifier is broken
                    observer.on_error(defect)
                    return
                if give_up:
                    observer.on_error(error)
                    return
                delay = ladder[attempt]
                attempt += 1
                error_type = type(error).__name__
                logger.bind(
                    attempt=attempt, attempts=len(ladder), delay=delay, error_type=error_type
                ).warning(
                    "store not reached ({}: {}); resubscribing in {}s (retry {}/{})",
                    error_type,
                    error,
                    delay,
                    attempt,
                    len(ladder),
                )
                if on_retry is not None:
                    try:
                        on_retry(error, attempt, delay)
                    except Exception as defect:  # noqa: BLE001 - forwarded: the hook is broken
                        observer.on_error(defect)
                        return
                if disposed:  # on_retry may have disposed the subscription
                    return
                when = resolve_scheduler(scheduler, subscribe_scheduler)
                timer.disposable = when.schedule_relative(delay, resubscribe)

            def resubscribe(_: abc.SchedulerBase, __: Any = None) -> None:
                if disposed:
                    return
                upstream.disposable = source.subscribe(
                    on_next, on_error, observer.on_completed, scheduler=subscribe_scheduler
                )

            def dispose() -> None:
                nonlocal disposed
                disposed = True

            # ``disposed`` is set first, so a timer racing the disposal never resubscribes.
            subscription = CompositeDisposable(Disposable(dispose), timer, upstream)
            upstream.disposable = source.subscribe(
                on_next, on_error, observer.on_completed, scheduler=subscribe_scheduler
            )
            return subscription

        return Observable(subscribe)

    return _retry
