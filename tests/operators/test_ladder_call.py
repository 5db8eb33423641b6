"""The ladder's coroutine driver, ``Ladder.call``: the same rule as the operator, for a
one-shot coroutine. Waits run on a ``TestScheduler`` (virtual time), advanced by the test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from reactivex.testing import TestScheduler

from rxmesh.exceptions import StoreError
from rxmesh.operators._ladder import DEFAULT_RETRY_DELAYS, Ladder
from rxmesh.testing import unreachable_error


class Flaky:
    """``await flaky()`` fails with ``errors`` in turn, then answers ``value``."""

    def __init__(self, errors: list[BaseException], value: str = "answer") -> None:
        self.errors = list(errors)
        self.value = value
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.value


async def drive(scheduler: TestScheduler, task: asyncio.Task[str], step: float = 0.05) -> None:
    """Advance virtual time in small steps, letting the loop run, until ``task`` is done."""
    for _ in range(1000):
        if task.done():
            return
        await asyncio.sleep(0)
        scheduler.advance_by(step)
        await asyncio.sleep(0)
    raise AssertionError("the task never finished")


async def test_transient_faults_are_retried_on_the_default_delays_then_it_answers() -> None:
    scheduler = TestScheduler()
    flaky = Flaky([unreachable_error(), unreachable_error()])
    retries: list[tuple[int, float]] = []
    ladder = Ladder.of(on_retry=lambda error, attempt, delay: retries.append((attempt, delay)))
    task = asyncio.ensure_future(ladder.call(flaky, scheduler=scheduler))
    await drive(scheduler, task)
    assert task.result() == "answer"
    assert flaky.calls == 3
    assert retries == [(1, 0.25), (2, 0.5)]
    assert scheduler.clock == pytest.approx(0.8, abs=0.06)  # 0.25 + 0.5, in steps of 0.05


async def test_the_budget_spent_the_last_error_surfaces_the_same_object() -> None:
    scheduler = TestScheduler()
    errors = [unreachable_error() for _ in range(5)]
    flaky = Flaky(list(errors))
    task = asyncio.ensure_future(Ladder.of().call(flaky, scheduler=scheduler))
    await drive(scheduler, task)
    assert flaky.calls == 1 + len(DEFAULT_RETRY_DELAYS)
    assert task.exception() is errors[3]


@pytest.mark.parametrize(
    "error",
    [StoreError("undefined table", sqlstate="42P01"), TimeoutError(), RuntimeError("defect")],
    ids=["42P01", "bare TimeoutError", "defect"],
)
async def test_negative_control_a_fault_the_rule_refuses_surfaces_at_once(
    error: BaseException,
) -> None:
    flaky = Flaky([error])
    with pytest.raises(type(error)) as caught:
        await Ladder.of().call(flaky, scheduler=TestScheduler())
    assert caught.value is error
    assert flaky.calls == 1


async def test_an_empty_ladder_never_retries() -> None:
    error = unreachable_error()
    flaky = Flaky([error])
    with pytest.raises(StoreError) as caught:
        await Ladder.of(()).call(flaky)
    assert caught.value is error


async def test_cancelling_during_a_wait_runs_nothing_again() -> None:
    scheduler = TestScheduler()
    flaky = Flaky([unreachable_error()])
    task = asyncio.ensure_future(Ladder.of().call(flaky, scheduler=scheduler))
    for _ in range(3):
        await asyncio.sleep(0)
    assert flaky.calls == 1  # now waiting 0.25 s of virtual time
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    scheduler.advance_by(10.0)
    await asyncio.sleep(0)
    assert flaky.calls == 1


async def test_a_broken_classifier_or_hook_ends_the_call_with_its_own_error() -> None:
    def broken(_: BaseException) -> bool:
        raise LookupError("classifier defect")

    with pytest.raises(LookupError):
        await Ladder.of(should_retry=broken).call(Flaky([unreachable_error()]))

    def hook(*_: object) -> None:
        raise KeyError("hook defect")

    with pytest.raises(KeyError):
        await Ladder.of(on_retry=hook).call(Flaky([unreachable_error()]))


def test_bad_arguments_are_refused_when_the_ladder_is_built() -> None:
    bad: list[Callable[[], object]] = [
        lambda: Ladder.of((-1.0,)),
        lambda: Ladder.of(("x",)),  # type: ignore[arg-type]
        lambda: Ladder.of(should_retry=3),  # type: ignore[arg-type]
    ]
    for build in bad:
        with pytest.raises((TypeError, ValueError)):
            build()
