"""Both ladder operators when the upstream fails INSIDE its subscribe call and the retry (or
re-open) runs before that call returns: a zero delay on ``ImmediateScheduler``, or on the thread
timer rxmesh uses outside asyncio. The RxJS case "should retry a synchronous source", ported to
``retry_transient_connect`` and ``reopen_on_transient_fault`` on both schedulers.

The thread-timer cases do not rely on the timer winning a race: the first subscribe call is held
(with a bound) until the retry's thread has subscribed again and finished, which is the order the
defect needs, every time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.scheduler import ImmediateScheduler
from reactivex.subject import Subject

from rxmesh.exceptions import StoreError
from rxmesh.operators import reopen_on_transient_fault, retry_transient_connect

BOUND = 5.0  # seconds; only ever waited in full when the code under test is broken

Watch = Callable[[Observable[str], abc.SchedulerBase | None], Observable[str]]


def _retried(source: Observable[str], scheduler: abc.SchedulerBase | None) -> Observable[str]:
    return source.pipe(retry_transient_connect((0, 0, 0), scheduler=scheduler))


def _reopened(source: Observable[str], scheduler: abc.SchedulerBase | None) -> Observable[str]:
    return reopen_on_transient_fault(lambda: source, backoff=(0,), scheduler=scheduler)


OPERATORS = pytest.mark.parametrize(
    "watch", [_retried, _reopened], ids=["retry_transient_connect", "reopen_on_transient_fault"]
)
# None: no asyncio loop runs in these tests, so rxmesh resolves reactivex's TimeoutScheduler.
SCHEDULERS = pytest.mark.parametrize(
    "scheduler", [ImmediateScheduler(), None], ids=["immediate", "thread-timer"]
)


class FailsWhileSubscribing:
    """An upstream whose first ``failures`` subscriptions fail inside the subscribe call; the
    next one watches ``live`` (a ``Subject`` unless given).

    With ``hold=True`` each failing subscribe call returns only after the retry it caused has
    subscribed again and, on a thread timer, that thread has finished: the retry has run to its
    end before the failing call returns.
    """

    def __init__(
        self,
        fault: Exception,
        *,
        failures: int = 1,
        hold: bool = True,
        live: Observable[str] | None = None,
    ) -> None:
        self.fault = fault
        self.failures = failures
        self.hold = hold
        self.subject: Subject[str] = Subject()
        self.live = self.subject if live is None else live
        self.subscriptions = 0
        self._resubscribed = [threading.Event() for _ in range(failures)]
        self._threads: list[threading.Thread | None] = [None] * failures

    def observable(self) -> Observable[str]:
        def subscribe(
            observer: abc.ObserverBase[str], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            index = self.subscriptions
            self.subscriptions += 1
            if index > 0:
                self._threads[index - 1] = threading.current_thread()
                self._resubscribed[index - 1].set()
            if index >= self.failures:
                return self.live.subscribe(observer, scheduler=scheduler)
            observer.on_error(self.fault)
            if self.hold:
                assert self._resubscribed[index].wait(BOUND), "no retry within the bound"
                thread = self._threads[index]
                if thread is not None and thread is not threading.current_thread():
                    thread.join(BOUND)
                    assert not thread.is_alive(), "the retry's thread did not finish"
            return Disposable()

        return Observable(subscribe)


class Received:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self.errors: list[Exception] = []
        self.completed = threading.Event()

    def subscribe(self, source: Observable[Any]) -> abc.DisposableBase:
        return source.subscribe(self.items.append, self.errors.append, lambda: self.completed.set())


def transient() -> StoreError:
    return StoreError("could not connect", sqlstate="08001")


@OPERATORS
@SCHEDULERS
def test_after_a_synchronous_resubscribe_the_live_upstream_keeps_delivering(
    watch: Watch, scheduler: abc.SchedulerBase | None
) -> None:
    """Fails at 1d389e8 because ``upstream.disposable = source.subscribe(...)`` stores the
    failed subscription AFTER the retry stored the live one, and that assignment disposes the
    live one: ``subject.on_next("reading")`` reaches nobody, and nothing ends the stream."""
    upstream = FailsWhileSubscribing(transient())
    received = Received()

    subscription = received.subscribe(watch(upstream.observable(), scheduler))
    upstream.subject.on_next("reading")
    upstream.subject.on_completed()

    assert upstream.subscriptions == 2
    assert received.items == ["reading"]
    assert received.errors == []
    assert received.completed.is_set()
    subscription.dispose()


@OPERATORS
@SCHEDULERS
def test_negative_control_a_defect_while_subscribing_ends_the_stream_with_no_retry(
    watch: Watch, scheduler: abc.SchedulerBase | None
) -> None:
    defect = StoreError("syntax error", sqlstate="42601")
    upstream = FailsWhileSubscribing(defect, hold=False)
    received = Received()

    received.subscribe(watch(upstream.observable(), scheduler))

    assert upstream.subscriptions == 1
    assert received.errors == [defect]
    assert received.items == []
    assert not upstream.subject.observers


@OPERATORS
@SCHEDULERS
def test_disposing_after_a_synchronous_resubscribe_unsubscribes_the_live_upstream(
    watch: Watch, scheduler: abc.SchedulerBase | None
) -> None:
    """The fix keeps the live subscription where disposal finds it (nothing leaks). Fails at
    1d389e8 at its first assertion: the live subscription was already gone."""
    upstream = FailsWhileSubscribing(transient())
    subscription = Received().subscribe(watch(upstream.observable(), scheduler))
    assert upstream.subject.observers

    subscription.dispose()

    assert not upstream.subject.observers


@SCHEDULERS
def test_retry_a_synchronous_source_that_fails_three_times_then_emits_and_completes(
    scheduler: abc.SchedulerBase | None,
) -> None:
    """The RxJS case itself: a cold, synchronous source (``of``) behind three synchronous
    failures, retried on zero delays. Fails at 1d389e8 on ``ImmediateScheduler``: the items of
    ``of`` are trampolined after the failed subscribe call returns, by which time the live
    subscription was disposed, so no item and no completion arrive. (On the thread timer the
    last retry runs on a thread of its own, whose items arrive before that disposal: that case
    passed then too.)"""
    upstream = FailsWhileSubscribing(transient(), failures=3, live=reactivex.of("a", "b", "c"))
    received = Received()

    received.subscribe(_retried(upstream.observable(), scheduler))

    assert received.completed.wait(BOUND), "the stream went silent"
    assert upstream.subscriptions == 4
    assert received.items == ["a", "b", "c"]
    assert received.errors == []


@SCHEDULERS
def test_reopen_a_synchronous_source_that_fails_three_times_then_emits_and_completes(
    scheduler: abc.SchedulerBase | None,
) -> None:
    """As above, for the standing watch (its backoff repeats its last step); fails at 1d389e8
    on ``ImmediateScheduler`` for the same reason."""
    upstream = FailsWhileSubscribing(transient(), failures=3, live=reactivex.of("a", "b", "c"))
    received = Received()

    received.subscribe(
        reopen_on_transient_fault(upstream.observable, backoff=(0,), scheduler=scheduler)
    )

    assert received.completed.wait(BOUND), "the stream went silent"
    assert upstream.subscriptions == 4
    assert received.items == ["a", "b", "c"]
    assert received.errors == []


def test_the_issue_s_minimal_case() -> None:
    """A factory that first returns ``reactivex.throw`` of a connect fault, then a Subject.
    Fails at 1d389e8: the reading reaches nobody."""
    subject: Subject[str] = Subject()
    openings: list[Observable[str]] = [reactivex.throw(transient()), subject]
    received = Received()

    received.subscribe(
        reopen_on_transient_fault(
            lambda: openings.pop(0), backoff=(0,), scheduler=ImmediateScheduler()
        )
    )
    subject.on_next("reading")

    assert received.items == ["reading"]
