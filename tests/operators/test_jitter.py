"""Optional jitter on the retry ladder and the re-open schedule, in virtual time with an injected
random source: up to ``jitter`` times each delay is added, never taken away, so the schedule stays
the floor; off by default.

Fails at 1d389e8 because neither ``retry_transient_connect`` nor ``reopen_on_transient_fault``
(nor ``Ladder.of`` / ``ReopenLadder.of``) took ``jitter=``: every caller that failed together
retried at the same instants. Negative controls: without ``jitter`` the waits are the schedule
exactly and the random source is never consulted; a source that draws outside [0, 1] and a jitter
outside [0, 1] are refused, naming them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import reactivex
from reactivex import Observable
from reactivex.testing import ReactiveTest, TestScheduler

from rxmesh.operators import (
    Ladder,
    ReopenLadder,
    reopen_on_transient_fault,
    retry_transient_connect,
)
from tests.operators._shared import connect_fault, timeline

on_error = ReactiveTest.on_error


def draws(*values: float) -> Iterator[float]:
    return iter(values)


def never() -> float:
    raise AssertionError("the random source was consulted without jitter")


def starts_of_retry(**options: object) -> list[float]:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, connect_fault()))
    scheduler.start(
        lambda: source.pipe(
            retry_transient_connect((1.0, 2.0, 4.0), scheduler=scheduler, **options)  # type: ignore[arg-type]
        )
    )
    return [s.subscribe for s in source.subscriptions]


def test_the_ladder_adds_up_to_jitter_times_each_delay() -> None:
    drawn = draws(0.0, 1.0, 0.5)
    starts = starts_of_retry(jitter=0.5, random=lambda: next(drawn))
    # Fails at 210, waits 1.0 * (1 + 0.5 * 0.0); at 221, waits 2.0 * (1 + 0.5); at 234, 4.0 * 1.25.
    assert starts == [200, 211.0, 224.0, 239.0]


def test_negative_control_without_jitter_the_waits_are_the_schedule_exactly() -> None:
    assert starts_of_retry(random=never) == [200, 211.0, 223.0, 237.0]
    assert starts_of_retry(jitter=0.0, random=never) == [200, 211.0, 223.0, 237.0]


def test_the_reopen_schedule_adds_up_to_jitter_times_each_backoff() -> None:
    scheduler = TestScheduler()
    openings: list[float] = []

    def open_watch() -> Observable[str]:
        openings.append(scheduler.clock)
        return reactivex.throw(connect_fault())

    drawn = draws(1.0, 0.25)
    results = scheduler.start(
        lambda: reopen_on_transient_fault(
            open_watch,
            backoff=(2.0, 8.0),
            max_consecutive=2,
            jitter=0.5,
            random=lambda: next(drawn),
            scheduler=scheduler,
        )
    )
    assert openings == [200, 203.0, 212.0]  # 2 * (1 + 0.5), then 8 * (1 + 0.125)
    assert [kind for _, kind, *_ in timeline(results.messages)] == ["E"]  # budget spent


def test_negative_control_the_reopen_schedule_without_jitter() -> None:
    scheduler = TestScheduler()
    openings: list[float] = []

    def open_watch() -> Observable[str]:
        openings.append(scheduler.clock)
        return reactivex.throw(connect_fault())

    scheduler.start(
        lambda: reopen_on_transient_fault(
            open_watch, backoff=(2.0, 8.0), max_consecutive=2, random=never, scheduler=scheduler
        )
    )
    assert openings == [200, 202.0, 210.0]


def test_jitter_and_its_source_are_checked() -> None:
    with pytest.raises(ValueError, match="jitter"):
        Ladder.of(jitter=1.5)
    with pytest.raises(TypeError, match="jitter"):
        ReopenLadder.of(jitter="0.1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="random"):
        Ladder.of(jitter=0.1, random=0.3)  # type: ignore[arg-type]
    ladder = Ladder.of((1.0,), jitter=0.1, random=lambda: 2.0)
    with pytest.raises(ValueError, match=r"random\(\) must return"):
        ladder.step(connect_fault(), 0, emitted=False)
