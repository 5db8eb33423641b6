"""LoopStallMonitor: stalls by the defaults' rule on a driven clock, and one real blocked loop."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator

import pytest

from rxmesh.diagnosis import LoopStallMonitor
from rxmesh.diagnosis._fields import (
    DEFAULT_LATE_THRESHOLD_SECONDS,
    DEFAULT_TICK_SECONDS,
    EVENT_LOOP_STALL,
)
from rxmesh.diagnosis._monitor import LoopStall, active_monitors
from tests.diagnosis.conftest import FakeClock, FakeLoop, SerializedLog


@pytest.fixture
def monitor(clock: FakeClock, fake_loop: FakeLoop) -> Iterator[LoopStallMonitor]:
    """A monitor with the DEFAULT tick and threshold, on a fake loop and a driven clock."""
    m = LoopStallMonitor(clock=clock)
    m.start(loop=fake_loop)  # type: ignore[arg-type]
    yield m
    m.stop()


def test_the_defaults_are_a_one_second_tick_and_a_two_second_threshold() -> None:
    assert DEFAULT_TICK_SECONDS == 1.0
    assert DEFAULT_LATE_THRESHOLD_SECONDS == 2.0
    stats = LoopStallMonitor().statistics()
    assert (stats.tick_seconds, stats.late_threshold_seconds) == (1.0, 2.0)
    assert not stats.running


def test_a_tick_more_than_two_seconds_late_is_a_stall(
    monitor: LoopStallMonitor, clock: FakeClock, fake_loop: FakeLoop
) -> None:
    assert fake_loop.delays == [1.0]
    clock.advance(1.0 + 3.2)  # due at +1.0, arrives 3.2 s late
    fake_loop.fire()
    (stall,) = monitor.stalls()
    assert stall.duration == pytest.approx(3.2)
    assert stall.ended_at == clock.now
    assert stall.started_at == pytest.approx(clock.now - 3.2)
    assert fake_loop.delays == [1.0, 1.0]  # re-armed one tick after the arrival


def test_a_tick_exactly_two_seconds_late_is_not_a_stall(
    monitor: LoopStallMonitor, clock: FakeClock, fake_loop: FakeLoop
) -> None:
    clock.advance(1.0 + 2.0)
    fake_loop.fire()
    clock.advance(1.0 + 1.5)
    fake_loop.fire()
    assert monitor.stalls() == ()
    assert monitor.statistics().ticks == 2
    assert monitor.statistics().stalls == 0


def test_on_time_ticks_are_counted_and_record_nothing(
    monitor: LoopStallMonitor, clock: FakeClock, fake_loop: FakeLoop
) -> None:
    for _ in range(5):
        clock.advance(1.0)
        fake_loop.fire()
    stats = monitor.statistics()
    assert (stats.ticks, stats.stalls, stats.last_stall) == (5, 0, None)


def test_the_stall_warning_is_worded_and_its_fields_are_bound(
    clock: FakeClock, fake_loop: FakeLoop, rxmesh_log: SerializedLog
) -> None:
    gc_time = FakeClock(0.0)

    def gc_clock() -> float:
        gc_time.advance(0.2)  # every reading 0.2 s later: each collection "takes" 0.2 s
        return gc_time.now

    seen: list[LoopStall] = []
    monitor = LoopStallMonitor(clock=clock, gc_clock=gc_clock, on_stall=seen.append)
    monitor.start(loop=fake_loop)  # type: ignore[arg-type]
    was_enabled = gc.isenabled()
    gc.disable()  # only the two collections below, no automatic ones
    try:
        gc.collect()
        gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    clock.advance(1.0 + 3.2)
    fake_loop.fire()
    monitor.stop()

    (record,) = rxmesh_log.records()
    assert record["level"]["name"] == "WARNING"
    assert record["message"] == "event loop stalled for 3.2 s (gc 0.4 s)"
    assert record["extra"]["event"] == EVENT_LOOP_STALL
    assert record["extra"]["stall_seconds"] == pytest.approx(3.2)
    assert record["extra"]["stall_gc_seconds"] == pytest.approx(0.4)
    assert [s.gc_seconds for s in seen] == [pytest.approx(0.4)]
    stats = monitor.statistics()
    assert stats.gc_collections == 2
    assert stats.gc_seconds == pytest.approx(0.4)


def test_gc_time_is_attributed_to_the_tick_it_fell_in_only(
    clock: FakeClock, fake_loop: FakeLoop
) -> None:
    gc_time = FakeClock(0.0)

    def gc_clock() -> float:
        gc_time.advance(0.25)
        return gc_time.now

    monitor = LoopStallMonitor(clock=clock, gc_clock=gc_clock)
    monitor.start(loop=fake_loop)  # type: ignore[arg-type]
    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection may land in the second tick
    try:
        gc.collect()
        clock.advance(1.0)
        fake_loop.fire()  # on time: it takes the pending gc time, and is no stall
        clock.advance(1.0 + 2.5)
        fake_loop.fire()
    finally:
        if was_enabled:
            gc.enable()
        monitor.stop()
    (stall,) = monitor.stalls()
    assert stall.gc_seconds == 0.0
    assert monitor.statistics().gc_seconds == pytest.approx(0.25)


def test_the_history_is_bounded_and_statistics_count_every_stall(
    clock: FakeClock, fake_loop: FakeLoop
) -> None:
    monitor = LoopStallMonitor(history=3, clock=clock)
    monitor.start(loop=fake_loop)  # type: ignore[arg-type]
    for late in (2.5, 3.0, 9.0, 4.0, 5.0):
        clock.advance(1.0 + late)
        fake_loop.fire()
    monitor.stop()
    assert [s.duration for s in monitor.stalls()] == pytest.approx([9.0, 4.0, 5.0])
    stats = monitor.statistics()
    assert stats.stalls == 5
    assert stats.stalls_remembered == 3
    assert stats.longest_stall_seconds == pytest.approx(9.0)
    assert stats.total_stall_seconds == pytest.approx(23.5)
    assert stats.last_stall is not None
    assert stats.last_stall.duration == pytest.approx(5.0)


def test_check_records_an_overdue_tick_before_it_fires(
    monitor: LoopStallMonitor, clock: FakeClock, fake_loop: FakeLoop
) -> None:
    clock.advance(1.0 + 2.4)
    stall = monitor.check()
    assert stall is not None
    assert stall.duration == pytest.approx(2.4)
    # the late tick was cancelled and re-armed: it will not count the same stall twice
    assert len(fake_loop.pending()) == 1
    clock.advance(1.0)
    fake_loop.fire()
    assert len(monitor.stalls()) == 1


def test_check_does_nothing_while_the_tick_is_not_overdue(
    monitor: LoopStallMonitor, clock: FakeClock, fake_loop: FakeLoop
) -> None:
    clock.advance(1.0 + 2.0)
    assert monitor.check() is None
    assert monitor.statistics().ticks == 0
    assert len(fake_loop.handles) == 1  # nothing re-armed


def test_start_and_stop_register_the_monitor_and_the_gc_callback(
    clock: FakeClock, fake_loop: FakeLoop
) -> None:
    monitor = LoopStallMonitor(clock=clock)
    before = len(gc.callbacks)
    monitor.start(loop=fake_loop)  # type: ignore[arg-type]
    assert active_monitors() == (monitor,)
    assert len(gc.callbacks) == before + 1
    with pytest.raises(RuntimeError, match="already running"):
        monitor.start(loop=fake_loop)  # type: ignore[arg-type]
    monitor.stop()
    monitor.stop()
    assert active_monitors() == ()
    assert len(gc.callbacks) == before
    assert fake_loop.pending() == []


def test_start_without_a_running_loop_is_refused() -> None:
    with pytest.raises(RuntimeError):
        LoopStallMonitor().start()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tick": 0}, "tick"),
        ({"late_threshold": -1}, "late_threshold"),
        ({"history": 0}, "history"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        LoopStallMonitor(**kwargs)  # type: ignore[arg-type]


async def test_a_loop_blocked_by_a_synchronous_sleep_records_one_stall() -> None:
    stalled: asyncio.Future[LoopStall] = asyncio.get_running_loop().create_future()
    monitor = LoopStallMonitor(tick=0.05, late_threshold=0.3, on_stall=stalled.set_result)
    monitor.start()
    try:
        await asyncio.sleep(0.12)  # a couple of on-time ticks first
        asyncio.get_running_loop().call_soon(time.sleep, 0.5)  # the blocking callback
        stall = await asyncio.wait_for(stalled, timeout=3.0)
        await asyncio.sleep(0.12)  # on-time ticks after it record nothing more
    finally:
        monitor.stop()
    assert 0.3 < stall.duration <= 0.5 + 0.05
    stats = monitor.statistics()
    assert stats.stalls == 1
    assert stats.ticks >= 3


async def test_an_idle_loop_records_no_stall() -> None:
    monitor = LoopStallMonitor(tick=0.02, late_threshold=0.3)
    monitor.start()
    try:
        await asyncio.sleep(0.2)
    finally:
        monitor.stop()
    stats = monitor.statistics()
    assert stats.stalls == 0
    assert stats.ticks >= 3


@pytest.mark.parametrize(
    ("block_starts", "block", "stall"),
    [
        (0.6, 2.5, 2.1),  # the tick due at 1.0 arrives at 3.1: 2.1 s late
        (0.2, 2.5, None),  # arrives at 2.7: 1.7 s late, not a stall (the block began early)
        (0.0, 3.01, 2.01),  # longer than tick + threshold: caught whatever the phase
        (0.99, 3.01, 3.0),
    ],
)
def test_with_the_defaults_a_block_is_a_stall_when_the_tick_it_delays_is_over_2_s_late(
    monitor: LoopStallMonitor,
    clock: FakeClock,
    fake_loop: FakeLoop,
    block_starts: float,
    block: float,
    stall: float | None,
) -> None:
    clock.advance(block_starts + block)  # the loop runs nothing until the block ends
    fake_loop.fire()
    durations = [s.duration for s in monitor.stalls()]
    assert durations == ([] if stall is None else [pytest.approx(stall)])


def test_a_failing_on_stall_callback_does_not_stop_the_ticker(
    clock: FakeClock, fake_loop: FakeLoop
) -> None:
    def explode(stall: LoopStall) -> None:
        raise RuntimeError("on_stall failed")

    monitor = LoopStallMonitor(clock=clock, on_stall=explode)
    monitor.start(loop=fake_loop)  # type: ignore[arg-type]
    try:
        clock.advance(1.0 + 3.0)
        with pytest.raises(RuntimeError, match="on_stall failed"):  # propagated, not swallowed
            fake_loop.fire()
        assert len(fake_loop.pending()) == 1  # but the next tick was armed first
        assert len(monitor.stalls()) == 1
    finally:
        monitor.stop()
