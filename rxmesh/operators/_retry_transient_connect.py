"""``retry_transient_connect``: the first rung of the ladder.

Retry once, then answer: a cold source that fails to reach its store before emitting anything is
resubscribed after each delay of a short ladder; the last error then surfaces unchanged to the
consumer's terminal arm, which classifies and answers and never retries again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from reactivex import Observable, abc

from rxmesh.faults import is_transient_connect_fault
from rxmesh.operators._ladder import DEFAULT_RETRY_DELAYS, NO_JITTER, Ladder, OnRetry, Random
from rxmesh.operators._resubscribe import resubscribing

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

    Each downstream subscription has its own budget, and after its first item a fault
    propagates at once (a resubscribe would mint a second Initial into a merge that has already
    counted this source). At most ``len(delays)`` resubscriptions, waiting
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
        # Each opening subscribes to the same cold source again: that is what a retry is.
        return resubscribing(lambda: source, ladder.decider, scheduler)

    return _retry
