"""``resubscribing``: the one subscription loop of the two Rx ladder operators, driven here by a
scripted rule, in virtual time. What it owes the rule: one ``decide`` per subscription, asked
with the fault and whether that opening delivered anything; the wait it answers; the fault itself
when it answers ``None``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reactivex import Observable
from reactivex.testing import ReactiveTest, TestScheduler

from rxmesh.operators._ladder import Decide
from rxmesh.operators._resubscribe import resubscribing
from tests.operators._shared import timeline

on_next = ReactiveTest.on_next
on_error = ReactiveTest.on_error
on_completed = ReactiveTest.on_completed


class Script:
    """A decider whose runs answer ``delays`` in turn (``None`` past the end) and record what
    they were asked."""

    def __init__(self, *delays: float) -> None:
        self.delays = delays
        self.runs: list[list[tuple[Exception, bool]]] = []

    def __call__(self) -> Decide:
        asked: list[tuple[Exception, bool]] = []
        self.runs.append(asked)

        def decide(fault: Exception, emitted: bool) -> float | None:
            asked.append((fault, emitted))
            index = len(asked) - 1
            return self.delays[index] if index < len(self.delays) else None

        return decide


def openings(*sources: Observable[str]) -> tuple[Callable[[], Observable[str]], list[int]]:
    """``open`` handing out ``sources`` in turn, and the list its calls are counted in."""
    calls: list[int] = []

    def open() -> Observable[str]:
        calls.append(len(calls))
        return sources[len(calls) - 1]

    return open, calls


def test_the_rule_is_asked_per_opening_whether_it_emitted_and_its_delays_are_waited() -> None:
    scheduler = TestScheduler()
    first, second, third = ValueError("1"), ValueError("2"), ValueError("3")
    open, calls = openings(
        scheduler.create_cold_observable(on_next(10, "a"), on_error(20, first)),
        scheduler.create_cold_observable(on_error(5, second)),
        scheduler.create_cold_observable(on_next(1, "b"), on_error(2, third)),
    )
    script = Script(100.0, 50.0)
    results = scheduler.start(lambda: resubscribing(open, script, scheduler))
    # subscribed at 200: "a" at 210, the fault at 220, a wait of 100, the second opening fails
    # at 325, a wait of 50, the third emits at 376 and fails at 377, which the rule ends with.
    assert timeline(results.messages) == [(210, "N", "a"), (376, "N", "b"), (377, "E", third)]
    assert script.runs == [[(first, True), (second, False), (third, True)]]
    assert len(calls) == 3


def test_a_factory_that_raises_is_a_fault_of_that_opening() -> None:
    scheduler = TestScheduler()
    broken = RuntimeError("factory")
    calls: list[int] = []

    def open() -> Observable[str]:
        calls.append(1)
        if len(calls) == 1:
            raise broken
        return scheduler.create_cold_observable(on_next(1, "x"), on_completed(2))

    script = Script(10.0)
    results = scheduler.start(lambda: resubscribing(open, script, scheduler))
    assert timeline(results.messages) == [(211, "N", "x"), (212, "C")]
    assert script.runs == [[(broken, False)]]


def test_a_rule_that_raises_ends_the_stream_with_that_exception() -> None:
    scheduler = TestScheduler()
    fault, defect = ValueError("fault"), TypeError("the rule is broken")

    def raising() -> Decide:
        def decide(_: Exception, __: bool) -> float | None:
            raise defect

        return decide

    open, calls = openings(scheduler.create_cold_observable(on_error(5, fault)))
    results = scheduler.start(lambda: resubscribing(open, raising, scheduler))
    assert timeline(results.messages) == [(205, "E", defect)]
    assert len(calls) == 1  # nothing was scheduled


def test_disposal_during_a_wait_opens_nothing_again() -> None:
    scheduler = TestScheduler()
    open, calls = openings(
        scheduler.create_cold_observable(on_error(5, ValueError("fault"))),
        scheduler.create_cold_observable(on_next(1, "late")),
    )
    results = scheduler.start(lambda: resubscribing(open, Script(100.0), scheduler), disposed=250)
    assert timeline(results.messages) == []
    assert len(calls) == 1
    # Control: left alone, the same wait opens the second source.
    scheduler = TestScheduler()
    open, calls = openings(
        scheduler.create_cold_observable(on_error(5, ValueError("fault"))),
        scheduler.create_cold_observable(on_next(1, "late")),
    )
    results = scheduler.start(lambda: resubscribing(open, Script(100.0), scheduler))
    assert timeline(results.messages) == [(306, "N", "late")]
    assert len(calls) == 2


def test_each_subscription_asks_for_a_rule_of_its_own() -> None:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(5, ValueError("fault")))
    script = Script()
    watch = resubscribing(lambda: source, script, scheduler)
    seen: list[Any] = []
    watch.subscribe(on_error=seen.append)
    watch.subscribe(on_error=seen.append)
    scheduler.start()
    assert len(script.runs) == 2
    assert [len(run) for run in script.runs] == [1, 1]
    assert len(seen) == 2
