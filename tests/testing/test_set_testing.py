"""``rxmesh.testing.set_testing``: every retry and re-open wait shrunk in one call (also as a
context manager that restores the previous setting), the budget unchanged.

Fails at 1d389e8 because there was no such switch: a test of code built on rxmesh waited out
the production schedules (1.75 s a ladder, 112 s a standing watch) or had to pass delays to every
operator. Negative control: outside ``set_testing`` (and after it is undone) the waits are the
schedules as defined.
"""

from __future__ import annotations

import asyncio

import pytest
import reactivex
from reactivex import Observable
from reactivex.testing import ReactiveTest, TestScheduler

from rxmesh.operators import Ladder, reopen_on_transient_fault, retry_transient_connect
from rxmesh.testing import is_testing, set_testing, unreachable_error
from tests.operators._shared import connect_fault

on_error = ReactiveTest.on_error


def retry_starts() -> list[float]:
    scheduler = TestScheduler()
    source = scheduler.create_cold_observable(on_error(10, connect_fault()))
    scheduler.start(lambda: source.pipe(retry_transient_connect(scheduler=scheduler)))
    return [s.subscribe for s in source.subscriptions]


def reopen_openings() -> list[float]:
    scheduler = TestScheduler()
    openings: list[float] = []

    def open_watch() -> Observable[str]:
        openings.append(scheduler.clock)
        return reactivex.throw(connect_fault())

    scheduler.start(lambda: reopen_on_transient_fault(open_watch, scheduler=scheduler))
    return openings


def test_set_testing_shrinks_every_wait_and_keeps_the_budget() -> None:
    assert not is_testing()
    with set_testing():
        assert is_testing()
        assert retry_starts() == [200, 210, 220, 230]  # four attempts, no wait between them
        assert reopen_openings() == [200] * 6  # five re-opens, then the fault surfaces
    assert not is_testing()


def test_a_scale_keeps_the_shape_of_the_schedules() -> None:
    set_testing(scale=0.1)
    try:
        assert retry_starts() == [200, 210.025, 220.075, 230.175]
    finally:
        set_testing(False)


def test_negative_control_the_schedules_as_defined_outside_and_after() -> None:
    assert retry_starts() == [200, 210.25, 220.75, 231.75]
    assert reopen_openings() == [200, 202, 207, 222, 252, 312]
    with set_testing():
        pass
    assert retry_starts() == [200, 210.25, 220.75, 231.75]


async def test_the_one_shot_ladder_does_not_wait_under_set_testing() -> None:
    errors: list[Exception] = []

    async def write() -> None:
        errors.append(unreachable_error())
        raise errors[-1]

    with set_testing():
        async with asyncio.timeout(5):  # the schedule itself would wait 60 s
            with pytest.raises(Exception) as raised:
                await Ladder.of((30.0, 30.0)).call(write)
    assert len(errors) == 3 and raised.value is errors[-1]


def test_nested_settings_restore_in_order() -> None:
    with set_testing(scale=0.5):
        with set_testing(False):
            assert not is_testing()
        assert is_testing()
    assert not is_testing()
