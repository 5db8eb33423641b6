"""``retry_unreachable_coordination``: retry "no answer in time" and "nobody answering", then
say so: the build coordination was unreachable, not refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from loguru import logger
from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable, SerialDisposable

from rxmesh._util.scheduling import resolve_scheduler
from rxmesh.exceptions import BuildCoordinationUnreachableError
from rxmesh.faults import is_coordination_unreachable, is_no_answer_in_time
from rxmesh.messaging._build import BUILD_COORDINATOR_ADDRESS

__all__ = [
    "DEFAULT_COORDINATION_ATTEMPTS",
    "DEFAULT_COORDINATION_BACKOFF",
    "retry_unreachable_coordination",
]

T = TypeVar("T")

DEFAULT_COORDINATION_ATTEMPTS = 3
"""How many times the build-claim handshake is tried in all."""

DEFAULT_COORDINATION_BACKOFF: tuple[float, ...] = (5.0, 15.0)
"""Seconds waited before the 2nd and the 3rd attempt (the last value repeats if more)."""


_NO_ANSWER = "no answer in time"
_NOBODY_ANSWERING = "nobody answering (no responders)"


def _describe_seen(seen: Sequence[str]) -> str:
    """What the failed attempts got, counted, in the order first seen: ``"2 with no answer in
    time, 1 with nobody answering (no responders)"``."""
    return ", ".join(f"{seen.count(kind)} with {kind}" for kind in dict.fromkeys(seen))


def retry_unreachable_coordination(
    handshake: Callable[[], Observable[T]],
    attempts: int = DEFAULT_COORDINATION_ATTEMPTS,
    backoff: Sequence[float] = DEFAULT_COORDINATION_BACKOFF,
    *,
    scheduler: abc.SchedulerBase | None = None,
    target: str = BUILD_COORDINATOR_ADDRESS,
    on_retry: Callable[[Exception, int, float], None] | None = None,
) -> Observable[T]:
    """Run ``handshake()`` and re-ask while the coordinator could not be reached.

    What counts is :func:`rxmesh.faults.is_coordination_unreachable`: "no answer in time" in both
    shapes (a ``TimeoutError``, a forwarding hop's FAILED "Response did not arrive on time" NACK)
    and nobody answering (a NO_RESPONDERS failure: over NATS a coordinator that is down, or not
    re-subscribed yet, is not a verdict). Anything else (a verdict NACK such as NOT_FOUND, a
    FAILED NACK without the phrases, any other exception) surfaces unchanged, at once. Before
    attempt ``i + 1`` it waits ``backoff[i - 1]`` seconds on the scheduler. When ``attempts`` are
    spent it errors with :class:`~rxmesh.exceptions.BuildCoordinationUnreachableError` (ERROR log;
    ``__cause__`` is the last error), which the caller takes to the durable-witness door.
    An ``attempts`` below 1 still runs the handshake once. Once an item has been emitted nothing
    is retried (a fault after an answer surfaces unchanged).

    Args:
        handshake: a factory of cold observables; called once per attempt.
        attempts: tries in all (default 3).
        backoff: seconds before each retry (default 5 s, then 15 s).
        scheduler: where the backoff timers run (default: see ``rxmesh._util.scheduling``).
        target: the coordinator address named in the error.
        on_retry: called ``(error, attempt, delay)`` once per scheduled retry.
    """
    budget = max(1, attempts)
    delays = tuple(float(d) for d in backoff)

    def subscribe(
        observer: abc.ObserverBase[T], subscription_scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        timers = resolve_scheduler(scheduler, subscription_scheduler)
        current = SerialDisposable()
        timer = SerialDisposable()
        state = {"attempt": 0, "emitted": False, "disposed": False}
        seen: list[str] = []  # what each failed attempt got, for the final message

        def on_next(value: T) -> None:
            state["emitted"] = True
            observer.on_next(value)

        def give_up(last: Exception) -> None:
            made = state["attempt"]
            error = BuildCoordinationUnreachableError(
                f"Build coordination at '{target}' gave no answer in time / nobody answering: "
                f"{made} attempt(s) failed: {_describe_seen(seen)}. Nothing was verified: no "
                f"build claim was confirmed. Last error: {type(last).__name__}: {last}"
            )
            error.__cause__ = last
            logger.bind(target=target, attempts=made).error(str(error))
            observer.on_error(error)

        def on_error(error: Exception) -> None:
            if state["disposed"]:
                return
            if state["emitted"] or not is_coordination_unreachable(error):
                observer.on_error(error)
                return
            what = _NO_ANSWER if is_no_answer_in_time(error) else _NOBODY_ANSWERING
            seen.append(what)
            attempt = int(state["attempt"])
            if attempt >= budget:
                give_up(error)
                return
            delay = delays[min(attempt - 1, len(delays) - 1)] if delays else 0.0
            logger.bind(target=target, attempt=attempt, delay=delay).warning(
                "'{}' could not be reached ({}; attempt {} of {}); asking again in {:g}s: {}",
                target,
                what,
                attempt,
                budget,
                delay,
                error,
            )
            if on_retry is not None:
                on_retry(error, attempt, delay)
            timer.disposable = timers.schedule_relative(delay, lambda _s, _st: run())

        def run() -> None:
            if state["disposed"]:
                return
            state["attempt"] = int(state["attempt"]) + 1
            try:
                source = handshake()
            except Exception as exc:  # noqa: BLE001 - a factory's failure is the attempt's error
                on_error(exc)
                return
            current.disposable = source.subscribe(
                on_next, on_error, observer.on_completed, scheduler=subscription_scheduler
            )

        def dispose() -> None:
            state["disposed"] = True

        run()
        return CompositeDisposable(Disposable(dispose), timer, current)

    return Observable(subscribe)
