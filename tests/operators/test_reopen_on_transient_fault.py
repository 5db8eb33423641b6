"""reopen_on_transient_fault: a standing watch re-opens after a transient fault only."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import reactivex
from reactivex import Observable
from reactivex.testing import ReactiveTest, TestScheduler

from rxmesh.exceptions import MeshDisposedError, StoreError
from rxmesh.faults import is_standing_watch_transient
from rxmesh.operators import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    reopen_on_transient_fault,
)
from tests.helpers import LogRecords
from tests.operators._shared import connect_fault, timeline

on_next = ReactiveTest.on_next
on_error = ReactiveTest.on_error
on_completed = ReactiveTest.on_completed


class Factory:
    """Hands out the given observables in turn (the last one repeats) and counts its calls."""

    def __init__(self, *openings: Observable[Any]) -> None:
        self.openings = openings
        self.calls = 0

    def __call__(self) -> Observable[Any]:
        opening = self.openings[min(self.calls, len(self.openings) - 1)]
        self.calls += 1
        return opening


def test_the_defaults_are_readable_constants_and_add_up_to_112_seconds() -> None:
    assert DEFAULT_REOPEN_BACKOFF == (2, 5, 15, 30, 60)
    assert DEFAULT_MAX_CONSECUTIVE_REOPENS == 5
    assert sum(DEFAULT_REOPEN_BACKOFF) == 112
    defaults = reopen_on_transient_fault.__kwdefaults__
    assert defaults is not None
    assert defaults["is_transient"] is is_standing_watch_transient


def test_a_mid_stream_connect_fault_reopens_through_the_factory_and_reads_again() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    first = scheduler.create_cold_observable(on_next(1, "initial"), on_error(5, fault))
    second = scheduler.create_cold_observable(on_next(1, "reading"))
    factory = Factory(first, second)

    watch = reopen_on_transient_fault(factory, scheduler=scheduler)
    assert factory.calls == 0  # lazy: nothing opens before a subscription
    results = scheduler.start(lambda: watch)

    assert factory.calls == 2
    assert [(s.subscribe, s.unsubscribe) for s in first.subscriptions] == [(200, 205)]
    assert [(s.subscribe, s.unsubscribe) for s in second.subscriptions] == [(207, 1000)]
    assert timeline(results.messages) == [(201, "N", "initial"), (208, "N", "reading")]


def test_negative_control_the_raw_watch_terminates_on_the_same_fault() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    first = scheduler.create_cold_observable(on_next(1, "initial"), on_error(5, fault))

    results = scheduler.start(lambda: first)

    assert [(s.subscribe, s.unsubscribe) for s in first.subscriptions] == [(200, 205)]
    assert timeline(results.messages) == [(201, "N", "initial"), (205, "E", fault)]


@pytest.mark.parametrize(
    "fault",
    [
        RuntimeError("defect"),
        StoreError('relation "nodes" does not exist', sqlstate="42P01"),
        TimeoutError("time-box"),
        MeshDisposedError("mesh disposed"),
    ],
    ids=["defect", "42P01", "bare-TimeoutError", "disposed-mesh"],
)
def test_a_non_transient_fault_ends_the_watch_with_no_reopen(fault: Exception) -> None:
    scheduler = TestScheduler()
    first = scheduler.create_cold_observable(on_next(1, "initial"), on_error(5, fault))
    factory = Factory(first)
    reopens: list[int] = []

    results = scheduler.start(
        lambda: reopen_on_transient_fault(
            factory, on_reopen=lambda f, n, d: reopens.append(n), scheduler=scheduler
        )
    )

    assert factory.calls == 1
    assert reopens == []
    assert timeline(results.messages) == [(201, "N", "initial"), (205, "E", fault)]


def test_six_consecutive_faults_surface_the_sixth_unchanged_after_the_whole_ladder() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    dead = scheduler.create_cold_observable(on_error(0, fault))
    factory = Factory(dead)
    reopens: list[tuple[BaseException, int, float, float]] = []

    def on_reopen(f: BaseException, n: int, delay: float) -> None:
        reopens.append((f, n, delay, scheduler.clock))

    results = scheduler.start(
        lambda: reopen_on_transient_fault(factory, on_reopen=on_reopen, scheduler=scheduler)
    )

    # 200 +2 -> 202 +5 -> 207 +15 -> 222 +30 -> 252 +60 -> 312: 112 s, then the 6th fault surfaces.
    assert [s.subscribe for s in dead.subscriptions] == [200, 202, 207, 222, 252, 312]
    assert factory.calls == 6
    assert timeline(results.messages) == [(312, "E", fault)]
    # on_reopen runs BEFORE each wait (at the fault's time), with (fault, n, delay).
    assert reopens == [
        (fault, 1, 2, 200),
        (fault, 2, 5, 202),
        (fault, 3, 15, 207),
        (fault, 4, 30, 222),
        (fault, 5, 60, 252),
    ]


def test_an_emission_between_faults_resets_the_ladder_to_two_seconds() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    blip = scheduler.create_cold_observable(on_error(1, fault))
    reads_then_dies = scheduler.create_cold_observable(on_next(1, "reading"), on_error(2, fault))
    healthy = scheduler.create_cold_observable(on_next(1, "reading again"))
    factory = Factory(blip, blip, reads_then_dies, blip, healthy)
    delays: list[float] = []

    results = scheduler.start(
        lambda: reopen_on_transient_fault(
            factory, on_reopen=lambda f, n, d: delays.append(d), scheduler=scheduler
        )
    )

    # blip 200-201 (+2), blip 203-204 (+5), reads 209..211 (count reset: +2), blip 213-214 (+5).
    assert [s.subscribe for s in blip.subscriptions] == [200, 203, 213]
    assert [s.subscribe for s in reads_then_dies.subscriptions] == [209]
    assert [s.subscribe for s in healthy.subscriptions] == [219]
    assert delays == [2, 5, 2, 5]
    assert timeline(results.messages) == [(210, "N", "reading"), (220, "N", "reading again")]


def test_a_short_ladder_repeats_its_last_step_while_the_budget_lasts() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    dead = scheduler.create_cold_observable(on_error(0, fault))

    results = scheduler.start(
        lambda: reopen_on_transient_fault(
            Factory(dead), backoff=(1, 4), max_consecutive=3, scheduler=scheduler
        )
    )

    assert [s.subscribe for s in dead.subscriptions] == [200, 201, 205, 209]
    assert timeline(results.messages) == [(209, "E", fault)]


def test_a_zero_budget_never_reopens() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    dead = scheduler.create_cold_observable(on_error(3, fault))

    results = scheduler.start(
        lambda: reopen_on_transient_fault(Factory(dead), max_consecutive=0, scheduler=scheduler)
    )

    assert len(dead.subscriptions) == 1
    assert timeline(results.messages) == [(203, "E", fault)]


def _group(*branches: Exception) -> ExceptionGroup[Exception]:
    return ExceptionGroup("several providers failed", list(branches))


def test_a_group_of_transient_faults_reopens() -> None:
    scheduler = TestScheduler()
    group = _group(connect_fault(), connect_fault())
    first = scheduler.create_cold_observable(on_error(1, group))
    second = scheduler.create_cold_observable(on_next(1, "reading"))
    factory = Factory(first, second)

    results = scheduler.start(lambda: reopen_on_transient_fault(factory, scheduler=scheduler))

    assert factory.calls == 2
    assert timeline(results.messages) == [(204, "N", "reading")]


@pytest.mark.parametrize(
    "defect_first", [False, True], ids=["transient,defect", "defect,transient"]
)
def test_a_group_with_a_defect_in_either_order_does_not_reopen(defect_first: bool) -> None:
    scheduler = TestScheduler()
    branches = [connect_fault(), RuntimeError("defect")]
    group = _group(*(reversed(branches) if defect_first else branches))
    first = scheduler.create_cold_observable(on_error(1, group))
    factory = Factory(first)

    results = scheduler.start(lambda: reopen_on_transient_fault(factory, scheduler=scheduler))

    assert factory.calls == 1
    assert timeline(results.messages) == [(201, "E", group)]


def test_completion_completes_the_watch_with_no_reopen() -> None:
    scheduler = TestScheduler()
    first = scheduler.create_cold_observable(on_next(1, "initial"), on_completed(2))
    factory = Factory(first)

    results = scheduler.start(lambda: reopen_on_transient_fault(factory, scheduler=scheduler))

    assert factory.calls == 1
    assert timeline(results.messages) == [(201, "N", "initial"), (202, "C")]


def test_disposal_during_a_backoff_cancels_the_reopen() -> None:
    scheduler = TestScheduler()
    dead = scheduler.create_cold_observable(on_error(1, connect_fault()))
    factory = Factory(dead)

    results = scheduler.start(
        lambda: reopen_on_transient_fault(factory, scheduler=scheduler), disposed=202
    )
    scheduler.advance_by(500)  # far past every step of the ladder

    assert factory.calls == 1
    assert [s.subscribe for s in dead.subscriptions] == [200]
    assert results.messages == []


def test_disposal_while_open_unsubscribes_the_upstream() -> None:
    scheduler = TestScheduler()
    live = scheduler.create_cold_observable(on_next(1, "initial"))

    scheduler.start(
        lambda: reopen_on_transient_fault(Factory(live), scheduler=scheduler), disposed=300
    )

    assert [(s.subscribe, s.unsubscribe) for s in live.subscriptions] == [(200, 300)]


def test_a_factory_that_raises_is_judged_like_a_fault_of_that_opening() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    healthy = scheduler.create_cold_observable(on_next(1, "reading"))
    calls = 0

    def flaky() -> Observable[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise fault
        return healthy

    results = scheduler.start(lambda: reopen_on_transient_fault(flaky, scheduler=scheduler))

    assert calls == 2
    assert timeline(results.messages) == [(203, "N", "reading")]


def test_a_factory_that_raises_a_defect_ends_the_watch() -> None:
    scheduler = TestScheduler()
    defect = RuntimeError("defect")

    def broken() -> Observable[str]:
        raise defect

    results = scheduler.start(lambda: reopen_on_transient_fault(broken, scheduler=scheduler))

    assert timeline(results.messages) == [(200, "E", defect)]


def test_each_watch_subscription_has_its_own_count() -> None:
    scheduler = TestScheduler()
    fault = connect_fault()
    dead = scheduler.create_cold_observable(on_error(0, fault))
    watch = reopen_on_transient_fault(
        Factory(dead), backoff=(1,), max_consecutive=1, scheduler=scheduler
    )
    first = scheduler.create_observer()
    second = scheduler.create_observer()

    scheduler.schedule_absolute(200, lambda *_: watch.subscribe(first))
    scheduler.schedule_absolute(300, lambda *_: watch.subscribe(second))
    scheduler.start()

    assert [s.subscribe for s in dead.subscriptions] == [200, 201, 300, 301]
    assert [m.time for m in first.messages] == [201]
    assert [m.time for m in second.messages] == [301]


@pytest.mark.parametrize(
    ("args", "kwargs", "error_type", "name"),
    [
        ((None,), {}, TypeError, "open"),
        ((Factory,), {"backoff": ()}, ValueError, "backoff"),
        ((Factory,), {"backoff": (2, -5)}, ValueError, "backoff"),
        ((Factory,), {"max_consecutive": -1}, ValueError, "max_consecutive"),
        ((Factory,), {"max_consecutive": 2.5}, TypeError, "max_consecutive"),
        ((Factory,), {"is_transient": "yes"}, TypeError, "is_transient"),
        ((Factory,), {"on_reopen": 1}, TypeError, "on_reopen"),
    ],
)
def test_bad_arguments_are_refused_when_the_watch_is_built(
    args: tuple[Any, ...], kwargs: dict[str, Any], error_type: type[Exception], name: str
) -> None:
    with pytest.raises(error_type, match=name):
        reopen_on_transient_fault(*args, **kwargs)


async def test_inside_a_running_loop_the_backoff_runs_on_the_loop_not_a_thread_timer() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    opening_threads: list[int] = []

    def open_watch() -> Observable[str]:
        opening_threads.append(threading.get_ident())
        if len(opening_threads) == 1:
            return reactivex.throw(connect_fault())
        return reactivex.of("reading")

    def reading(value: str) -> None:
        loop.call_soon_threadsafe(done.set_result, value)

    def failed(error: Exception) -> None:
        loop.call_soon_threadsafe(done.set_exception, error)

    subscription = reopen_on_transient_fault(open_watch, backoff=(0.01,)).subscribe(
        on_next=reading, on_error=failed
    )
    try:
        assert await asyncio.wait_for(done, timeout=2.0) == "reading"
    finally:
        subscription.dispose()
    assert opening_threads == [threading.get_ident()] * 2


def test_a_broken_on_reopen_hook_ends_the_watch_with_its_own_error_and_no_reopen() -> None:
    scheduler = TestScheduler()
    dead = scheduler.create_cold_observable(on_error(1, connect_fault()))
    factory = Factory(dead)
    broken = RuntimeError("hook defect")

    def on_reopen(fault: BaseException, n: int, delay: float) -> None:
        raise broken

    results = scheduler.start(
        lambda: reopen_on_transient_fault(factory, on_reopen=on_reopen, scheduler=scheduler)
    )

    assert factory.calls == 1
    assert timeline(results.messages) == [(201, "E", broken)]


def test_each_reopen_is_logged_at_warning_and_a_spent_budget_at_error(
    log_records: LogRecords,
) -> None:
    scheduler = TestScheduler()
    dead = scheduler.create_cold_observable(on_error(0, connect_fault()))

    scheduler.start(lambda: reopen_on_transient_fault(Factory(dead), scheduler=scheduler))

    warnings_logged = log_records.lines("WARNING")
    assert warnings_logged[2] == (
        "WARNING StoreError interrupted the standing watch subscription — re-opening (3/5) in 15s"
    )
    assert len(warnings_logged) == 6
    assert warnings_logged[5].startswith("ERROR StoreError ended the standing watch: 5 consecutive")


def test_a_non_transient_fault_is_left_to_the_owner_to_report(log_records: LogRecords) -> None:
    scheduler = TestScheduler()
    dead = scheduler.create_cold_observable(on_error(0, RuntimeError("defect")))

    scheduler.start(lambda: reopen_on_transient_fault(Factory(dead), scheduler=scheduler))

    warnings_logged = log_records.lines("WARNING")
    assert warnings_logged == []
