"""retry_transient_connect: retry once, before the first item, then answer."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.testing import ReactiveTest, TestScheduler

from rxmesh.exceptions import StoreError
from rxmesh.faults import is_transient_connect_fault
from rxmesh.operators import DEFAULT_RETRY_DELAYS, retry_transient_connect
from tests.helpers import LogRecords
from tests.operators._shared import connect_fault, timeline

on_next = ReactiveTest.on_next
on_error = ReactiveTest.on_error
on_completed = ReactiveTest.on_completed
subscribe = ReactiveTest.subscribe


def test_the_default_ladder_is_a_readable_constant() -> None:
    assert DEFAULT_RETRY_DELAYS == (0.25, 0.5, 1.0)
    assert sum(DEFAULT_RETRY_DELAYS) == 1.75


def test_a_store_that_stays_away_gets_four_subscriptions_then_the_same_error() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    source = scheduler.create_cold_observable(on_error(10, fault))

    results = scheduler.start(lambda: source.pipe(retry_transient_connect(scheduler=scheduler)))

    # 200 -> fails at 210, waits 0.25; fails at 220.25, waits 0.5; at 230.75, waits 1.0.
    starts = [s.subscribe for s in source.subscriptions]
    assert starts == [200, 210.25, 220.75, 231.75]
    # ColdObservable records unsubscribe times truncated to int; each attempt ended on its error.
    assert [s.unsubscribe for s in source.subscriptions] == [210, 220, 230, 241]
    failed_at = [start + 10 for start in starts]
    assert [later - failed for failed, later in zip(failed_at, starts[1:], strict=False)] == [
        0.25,
        0.5,
        1.0,
    ]
    assert timeline(results.messages) == [(241.75, "E", fault)]
    assert timeline(results.messages)[0][2] is fault  # the same object, never wrapped


def test_the_subscription_scheduler_is_used_when_none_is_given() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    source = scheduler.create_cold_observable(on_error(10, fault))

    results = scheduler.start(lambda: source.pipe(retry_transient_connect()))

    assert len(source.subscriptions) == 4
    assert timeline(results.messages) == [(241.75, "E", fault)]


def test_a_source_that_recovers_within_the_budget_emits_normally() -> None:
    scheduler = TestScheduler()
    failing = scheduler.create_cold_observable(on_error(10, connect_fault()))
    healthy = scheduler.create_cold_observable(on_next(5, "initial"), on_completed(6))
    attempts = 0

    def either(_: abc.SchedulerBase) -> Observable[str]:
        nonlocal attempts
        attempts += 1
        return failing if attempts <= 2 else healthy

    results = scheduler.start(
        lambda: reactivex.defer(either).pipe(retry_transient_connect(scheduler=scheduler))
    )

    # ColdObservable records unsubscribe times truncated to int.
    assert [(s.subscribe, s.unsubscribe) for s in failing.subscriptions] == [
        (200, 210),
        (210.25, 220),
    ]
    assert [s.subscribe for s in healthy.subscriptions] == [220.75]
    assert timeline(results.messages) == [(225.75, "N", "initial"), (226.75, "C")]


@pytest.mark.parametrize(
    "error",
    [
        StoreError("relation does not exist", sqlstate="42P01"),
        StoreError("duplicate key", sqlstate="23505"),
        StoreError("could not serialize access", sqlstate="40001"),
        TimeoutError("request timed out"),
        RuntimeError("defect"),
    ],
    ids=["42P01", "23505", "40001", "bare-TimeoutError", "defect"],
)
def test_a_fault_that_is_not_a_connect_fault_is_not_retried(error: Exception) -> None:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, error))

    results = scheduler.start(lambda: source.pipe(retry_transient_connect(scheduler=scheduler)))

    assert source.subscriptions == [subscribe(200, 210)]
    assert timeline(results.messages) == [(210, "E", error)]


def test_a_fault_after_the_first_item_propagates_without_resubscribing() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    source = scheduler.create_cold_observable(on_next(5, "initial"), on_error(10, fault))

    results = scheduler.start(lambda: source.pipe(retry_transient_connect(scheduler=scheduler)))

    assert source.subscriptions == [subscribe(200, 210)]
    assert timeline(results.messages) == [(205, "N", "initial"), (210, "E", fault)]


def test_disposal_during_a_backoff_resubscribes_nothing() -> None:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, connect_fault()))

    results = scheduler.start(
        lambda: source.pipe(retry_transient_connect(scheduler=scheduler)), disposed=210.1
    )
    scheduler.advance_by(100)  # long after the 0.25 s timer would have fired

    assert source.subscriptions == [subscribe(200, 210)]
    assert results.messages == []


def test_on_retry_gets_error_attempt_and_delay_before_each_wait() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    source = scheduler.create_cold_observable(on_error(10, fault))
    calls: list[tuple[BaseException, int, float, float]] = []

    def on_retry(error: BaseException, attempt: int, delay: float) -> None:
        calls.append((error, attempt, delay, scheduler.clock))

    scheduler.start(
        lambda: source.pipe(retry_transient_connect(on_retry=on_retry, scheduler=scheduler))
    )

    assert calls == [(fault, 1, 0.25, 210), (fault, 2, 0.5, 220.25), (fault, 3, 1.0, 230.75)]


def test_each_subscription_has_its_own_budget() -> None:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, connect_fault()))
    guarded = source.pipe(retry_transient_connect(scheduler=scheduler))
    first = scheduler.create_observer()
    second = scheduler.create_observer()

    scheduler.schedule_absolute(200, lambda *_: guarded.subscribe(first))
    scheduler.schedule_absolute(300, lambda *_: guarded.subscribe(second))
    scheduler.start()

    assert [s.subscribe for s in source.subscriptions] == [
        200,
        210.25,
        220.75,
        231.75,
        300,
        310.25,
        320.75,
        331.75,
    ]
    assert len(first.messages) == len(second.messages) == 1


def test_an_empty_ladder_never_retries() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    source = scheduler.create_cold_observable(on_error(10, fault))

    results = scheduler.start(lambda: source.pipe(retry_transient_connect((), scheduler=scheduler)))

    assert source.subscriptions == [subscribe(200, 210)]
    assert timeline(results.messages) == [(210, "E", fault)]


def test_a_custom_classifier_decides_what_is_retried() -> None:
    scheduler = TestScheduler()
    error = TimeoutError("hub timed out")
    source = scheduler.create_cold_observable(on_error(10, error))

    results = scheduler.start(
        lambda: source.pipe(
            retry_transient_connect(
                (1, 1), should_retry=lambda e: isinstance(e, TimeoutError), scheduler=scheduler
            )
        )
    )

    assert [s.subscribe for s in source.subscriptions] == [200, 211, 222]
    assert timeline(results.messages) == [(232, "E", error)]


def test_the_default_classifier_is_the_one_rule() -> None:
    defaults = retry_transient_connect.__kwdefaults__
    assert defaults is not None
    assert defaults["should_retry"] is is_transient_connect_fault


def test_each_scheduled_retry_is_logged_at_warning(log_records: LogRecords) -> None:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, connect_fault()))

    scheduler.start(lambda: source.pipe(retry_transient_connect(scheduler=scheduler)))

    warnings_logged = log_records.lines("WARNING")
    assert len(warnings_logged) == 3
    assert all(line.startswith("WARNING store not reached") for line in warnings_logged)
    assert "retry 3/3" in warnings_logged[2]


@pytest.mark.parametrize(
    ("kwargs", "error_type", "name"),
    [
        ({"delays": (0.25, -1)}, ValueError, "delays"),
        ({"delays": (float("nan"),)}, ValueError, "delays"),
        ({"delays": "0.25"}, TypeError, "delays"),
        ({"delays": ("1",)}, TypeError, "delays"),
        ({"should_retry": None}, TypeError, "should_retry"),
        ({"on_retry": 3}, TypeError, "on_retry"),
    ],
)
def test_bad_arguments_are_refused_when_the_operator_is_built(
    kwargs: dict[str, Any], error_type: type[Exception], name: str
) -> None:
    with pytest.raises(error_type, match=name):
        retry_transient_connect(**kwargs)


async def test_inside_a_running_loop_the_backoff_runs_on_the_loop_not_a_thread_timer() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[int]] = loop.create_future()
    fault = connect_fault()
    subscribing_threads: list[int] = []

    def attempt(_: abc.SchedulerBase) -> Observable[int]:
        subscribing_threads.append(threading.get_ident())
        return reactivex.throw(fault) if len(subscribing_threads) == 1 else reactivex.of(7)

    received: list[int] = []

    def failed(error: Exception) -> None:
        loop.call_soon_threadsafe(done.set_exception, error)

    def completed() -> None:
        loop.call_soon_threadsafe(done.set_result, received)

    reactivex.defer(attempt).pipe(retry_transient_connect((0.01,))).subscribe(
        on_next=received.append, on_error=failed, on_completed=completed
    )

    assert await asyncio.wait_for(done, timeout=2.0) == [7]
    assert subscribing_threads == [threading.get_ident()] * 2


def test_a_broken_on_retry_hook_ends_the_stream_with_its_own_error_and_no_retry() -> None:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, connect_fault()))
    broken = RuntimeError("hook defect")

    def on_retry(error: BaseException, attempt: int, delay: float) -> None:
        raise broken

    results = scheduler.start(
        lambda: source.pipe(retry_transient_connect(on_retry=on_retry, scheduler=scheduler))
    )

    assert len(source.subscriptions) == 1
    assert timeline(results.messages) == [(210, "E", broken)]


def test_a_broken_classifier_ends_the_stream_with_its_own_error() -> None:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, connect_fault()))
    broken = RuntimeError("classifier defect")

    def should_retry(error: BaseException) -> bool:
        raise broken

    results = scheduler.start(
        lambda: source.pipe(retry_transient_connect(should_retry=should_retry, scheduler=scheduler))
    )

    assert len(source.subscriptions) == 1
    assert timeline(results.messages) == [(210, "E", broken)]
