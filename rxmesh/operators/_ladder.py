"""The retry ladder's one definition: its delays, its classifier, its hook, and the rule that
decides between "retry after d seconds" and "give up with the last error"; and the standing
watch's re-open schedule, :class:`ReopenLadder`, defined once the same way.

Both compute every wait in one place, :func:`_wait`: the schedule's delay, lengthened by the
optional jitter, scaled while :func:`rxmesh.testing.set_testing` is on.

Thin drivers use them and hold no rule of their own: the reactivex operator
:func:`~rxmesh.operators.retry_transient_connect` (for streams: "before the first item"),
:meth:`Ladder.call` (for one-shot coroutines: a coroutine has no item before its result, so every
failure is "before the first item") and :func:`~rxmesh.aio.retry_transient_connect_async`
(for async iterators); :func:`~rxmesh.operators.reopen_on_transient_fault` and
:func:`~rxmesh.aio.reopen_on_transient_fault_async` for the re-open.
"""

from __future__ import annotations

import asyncio
import math
import random as _random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from loguru import logger
from reactivex import abc

from rxmesh._util.arguments import at_least, require_callable, validate_ladder
from rxmesh.faults import is_standing_watch_transient, is_transient_connect_fault
from rxmesh.instrumentation import _seam as _instrumentation

__all__ = [
    "DEFAULT_MAX_CONSECUTIVE_REOPENS",
    "DEFAULT_REOPEN_BACKOFF",
    "DEFAULT_RETRY_DELAYS",
    "NO_JITTER",
    "Decide",
    "Ladder",
    "OnReopen",
    "OnRetry",
    "Random",
    "ReopenLadder",
    "delay_scale",
    "require_callable",
    "scale_delays",
    "scheduler_sleep",
    "validate_jitter",
    "validate_ladder",
]

T = TypeVar("T")

DEFAULT_RETRY_DELAYS: tuple[float, ...] = (0.25, 0.5, 1.0)
"""Seconds waited before each retry: four attempts at most, 1.75 s of budget."""

OnRetry = Callable[[BaseException, int, float], object]
"""``on_retry(error, attempt, delay)``: ``attempt`` counts retries from 1."""

DEFAULT_REOPEN_BACKOFF: tuple[float, ...] = (2, 5, 15, 30, 60)
"""Seconds waited before the n-th consecutive re-open (the last step repeats if allowed)."""

DEFAULT_MAX_CONSECUTIVE_REOPENS = 5
"""Re-opens in a row without an emission; with the defaults a dead store surfaces after 112 s."""

OnReopen = Callable[[BaseException, int, float], object]
"""``on_reopen(fault, n, delay)``: ``n`` is the consecutive re-open about to be waited for."""


NO_JITTER = 0.0
"""The default ``jitter``: the schedules wait their delays exactly."""

Random = Callable[[], float]
"""A source of uniform draws in ``[0, 1]`` (``random.random`` unless one is injected)."""

Decide = Callable[[Exception, bool], float | None]
"""``decide(fault, emitted)``: one run's rule, as the drivers ask it: seconds to wait before the
next opening, or ``None`` to give up (``emitted``: whether the opening that failed delivered
anything). :meth:`Ladder.decider` and :meth:`ReopenLadder.decider` make one per run."""

_scale: float | None = None  # set by rxmesh.testing.set_testing: every wait is multiplied by it


def scale_delays(scale: float | None) -> float | None:
    """Multiply every wait of every ladder and re-open schedule by ``scale`` from now on (``None``:
    the schedules as defined); returns the previous scale. :func:`rxmesh.testing.set_testing` is
    the public way in."""
    global _scale
    if scale is not None and (not _is_number(scale) or not 0 <= scale < math.inf):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    previous, _scale = _scale, None if scale is None else float(scale)
    return previous


def delay_scale() -> float | None:
    """The scale :func:`scale_delays` set (``None``: off)."""
    return _scale


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_jitter(jitter: object, random: Random | None) -> float:
    """``jitter`` as a float in ``[0, 1]`` and ``random`` callable (or ``None``), else the error
    naming the argument."""
    if not _is_number(jitter):
        raise TypeError(f"jitter must be a number, got {type(jitter).__name__}")
    assert isinstance(jitter, int | float)
    if not 0 <= jitter <= 1:
        raise ValueError(
            f"jitter must be between 0 and 1 (a fraction of each delay), got {jitter!r}"
        )
    require_callable("random", random, optional=True)
    return float(jitter)


def _wait(delay: float, jitter: float, random: Random | None) -> float:
    """The wait before a retry or re-open whose scheduled delay is ``delay``: up to ``jitter``
    times the delay added, drawn from ``random`` — never shorter than the schedule, which stays
    the contract; then scaled while testing."""
    if jitter:
        draw = (random or _random.random)()
        if not 0 <= draw <= 1:
            raise ValueError(f"random() must return a number in [0, 1], got {draw!r}")
        delay += delay * jitter * draw
    return delay if _scale is None else delay * _scale


def _first_report(error: BaseException, attempt: int) -> bool:
    """Whether ``error``'s retry number ``attempt`` is logged here for the first time (the mark
    is kept on the error object itself: exceptions take no weak reference)."""
    if getattr(error, "_rxmesh_retry_logged", 0) >= attempt:
        return False
    try:
        error._rxmesh_retry_logged = attempt  # type: ignore[attr-defined]
    except AttributeError:  # an exception type with __slots__: logged every time
        pass
    return True


async def scheduler_sleep(scheduler: abc.SchedulerBase | None, seconds: float) -> None:
    """Wait ``seconds`` on ``scheduler`` (virtual time on a ``TestScheduler``), or on the running
    loop when it is ``None``. Cancelling the waiting task cancels the timer."""
    if scheduler is None:
        await asyncio.sleep(seconds)
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def fire(_: abc.SchedulerBase, __: Any = None) -> None:
        if _on_loop_thread(loop):
            _resolve(done)  # the waiting task wakes on the loop's next turn, as a timer would
        else:
            loop.call_soon_threadsafe(_resolve, done)

    timer = scheduler.schedule_relative(seconds, fire)
    try:
        await done
    finally:
        timer.dispose()


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


@dataclass(frozen=True, slots=True)
class Ladder:
    """Retry once, then answer: ``len(delays)`` retries at most, waiting ``delays[i]`` before the
    i-th, only for errors ``should_retry`` accepts, only before the first item.

    Build it with :meth:`of` (which validates); await :meth:`call` to run a coroutine through
    it; drivers use :meth:`step`.

    Example:
        >>> import asyncio
        >>> from rxmesh.operators import Ladder
        >>> async def read() -> str:
        ...     return "row"
        >>> asyncio.run(Ladder.of().call(read))
        'row'
    """

    delays: tuple[float, ...]
    should_retry: Callable[[BaseException], bool]
    on_retry: OnRetry | None
    jitter: float = NO_JITTER
    random: Random | None = None

    @classmethod
    def of(
        cls,
        delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
        *,
        should_retry: Callable[[BaseException], bool] = is_transient_connect_fault,
        on_retry: OnRetry | None = None,
        jitter: float = NO_JITTER,
        random: Random | None = None,
    ) -> Ladder:
        """A validated ladder (``TypeError``/``ValueError`` naming the bad argument).

        ``jitter``: up to that fraction of each delay is added at random (0, the default: the
        delays exactly), so many callers that failed together do not retry together; the
        delays stay the floor. ``random``: the source of the draws (``random.random``).
        """
        ladder = validate_ladder("delays", delays, allow_empty=True)
        require_callable("should_retry", should_retry)
        require_callable("on_retry", on_retry, optional=True)
        return cls(ladder, should_retry, on_retry, validate_jitter(jitter, random), random)

    def step(self, error: BaseException, retries: int, *, emitted: bool) -> float | None:
        """The rule: after the failure ``error`` (with ``retries`` retries made so far, and
        ``emitted`` whether anything reached downstream), the delay before the next attempt, or
        ``None`` to give up — the driver then surfaces ``error`` itself, unchanged.

        A scheduled retry is logged at WARNING and told to ``on_retry(error, attempt, delay)``.
        Whatever the classifier or the hook raises propagates (the driver ends with it).
        """
        if emitted or retries >= len(self.delays) or not self.should_retry(error):
            return None
        delay = _wait(self.delays[retries], self.jitter, self.random)
        attempt = retries + 1
        error_type = type(error).__name__
        # The members of one write group (and the callers of one shared connect) all get the
        # group's one error object: one WARNING per retry of it, the rest at DEBUG.
        log = logger.bind(
            attempt=attempt, attempts=len(self.delays), delay=delay, error_type=error_type
        )
        (log.warning if _first_report(error, attempt) else log.debug)(
            "store not reached ({}: {}); resubscribing in {}s (retry {}/{})",
            error_type,
            error,
            delay,
            attempt,
            len(self.delays),
        )
        if _instrumentation.enabled:
            _instrumentation.retry_scheduled(error, attempt, delay)
        if self.on_retry is not None:
            self.on_retry(error, attempt, delay)
        return delay

    def decider(self) -> Decide:
        """A fresh :data:`Decide` for one run (one subscription, one iteration) that counts that
        run's retries: a budget shared across runs is a bug."""
        retries = 0

        def decide(error: Exception, emitted: bool) -> float | None:
            nonlocal retries
            delay = self.step(error, retries, emitted=emitted)
            retries += 1
            return delay

        return decide

    async def call(
        self,
        work: Callable[[], Awaitable[T]],
        *,
        scheduler: abc.SchedulerBase | None = None,
    ) -> T:
        """Await ``work()``; after a failure the ladder accepts, wait and call it again.

        Giving up raises the last error, the very same object. ``CancelledError`` (a
        ``BaseException``) is never classified: it propagates at once, and cancelling during a
        wait cancels the timer (nothing runs again).
        """
        retries = 0
        while True:
            try:
                return await work()
            except Exception as error:
                delay = self.step(error, retries, emitted=False)
                if delay is None:
                    raise
            retries += 1
            # The running loop's own sleep when no scheduler is given: one coroutine fewer for
            # every call waiting here (in an outage, all of them).
            await (asyncio.sleep(delay) if scheduler is None else scheduler_sleep(scheduler, delay))


@dataclass(frozen=True, slots=True)
class ReopenLadder:
    """A standing watch's re-open schedule: after a transient fault, re-open after
    ``backoff[min(n, len(backoff)) - 1]`` seconds, at most ``max_consecutive`` times in a row
    without an emission; anything emitted by an opening resets the count.

    Build it with :meth:`of` (which validates); use :meth:`step` from a driver.
    """

    backoff: tuple[float, ...]
    max_consecutive: int
    is_transient: Callable[[BaseException], bool]
    on_reopen: OnReopen | None
    jitter: float = NO_JITTER
    random: Random | None = None

    @classmethod
    def of(
        cls,
        backoff: Sequence[float] = DEFAULT_REOPEN_BACKOFF,
        *,
        max_consecutive: int = DEFAULT_MAX_CONSECUTIVE_REOPENS,
        is_transient: Callable[[BaseException], bool] = is_standing_watch_transient,
        on_reopen: OnReopen | None = None,
        jitter: float = NO_JITTER,
        random: Random | None = None,
    ) -> ReopenLadder:
        """A validated schedule (``TypeError``/``ValueError`` naming the bad argument);
        ``jitter`` and ``random`` as in :meth:`Ladder.of`."""
        steps = validate_ladder("backoff", backoff, allow_empty=False)
        at_least("max_consecutive", max_consecutive, 0)
        require_callable("is_transient", is_transient)
        require_callable("on_reopen", on_reopen, optional=True)
        jitter = validate_jitter(jitter, random)
        return cls(steps, max_consecutive, is_transient, on_reopen, jitter, random)

    def step(
        self, fault: BaseException, consecutive: int, *, emitted: bool
    ) -> tuple[int, float | None]:
        """The rule: after the opening that ended with ``fault`` (``consecutive`` re-opens in a row
        so far, ``emitted`` whether that opening delivered anything), the new count ``n`` and the
        delay before re-opening, or ``None`` to end the watch — the driver then surfaces
        ``fault`` itself, unchanged.

        ``n = (0 if emitted else consecutive) + 1``. A re-open is logged at WARNING and told to
        ``on_reopen(fault, n, delay)`` before the wait; a spent budget is logged at ERROR.
        Whatever the classifier or the hook raises propagates (the driver ends with it).
        """
        n = (0 if emitted else consecutive) + 1
        if not self.is_transient(fault):
            if _instrumentation.enabled:
                _instrumentation.watch_surfaced("not_transient", fault, n - 1)
            return n, None
        fault_type = type(fault).__name__
        if n > self.max_consecutive:
            logger.bind(reopens=n - 1, error_type=fault_type).error(
                "{} ended the standing watch: {} consecutive re-open(s) read nothing ({})",
                fault_type,
                n - 1,
                fault,
            )
            if _instrumentation.enabled:
                _instrumentation.watch_surfaced("budget_spent", fault, n - 1)
            return n, None
        delay = _wait(self.backoff[min(n, len(self.backoff)) - 1], self.jitter, self.random)
        logger.bind(
            reopen=n, max_reopens=self.max_consecutive, delay=delay, error_type=fault_type
        ).warning(
            "{} interrupted the standing watch subscription — re-opening ({}/{}) in {}s",
            fault_type,
            n,
            self.max_consecutive,
            f"{delay:g}",
        )
        if _instrumentation.enabled:
            _instrumentation.watch_reopened(fault, n, self.max_consecutive, delay)
        if self.on_reopen is not None:
            self.on_reopen(fault, n, delay)
        return n, delay

    def decider(self) -> Decide:
        """A fresh :data:`Decide` for one watch that keeps that watch's consecutive count: each
        watch has its own."""
        consecutive = 0

        def decide(fault: Exception, emitted: bool) -> float | None:
            nonlocal consecutive
            consecutive, delay = self.step(fault, consecutive, emitted=emitted)
            return delay

        return decide
