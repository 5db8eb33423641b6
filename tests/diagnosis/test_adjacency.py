"""Stall adjacency: every store-unreachable report names a stall that ended just before it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rxmesh.diagnosis import (
    LoopStallMonitor,
    StallAdjacency,
    StoreUnreachableReport,
    report_store_unreachable,
    stall_adjacency,
    triage,
    with_stall_adjacency,
)
from rxmesh.diagnosis._fields import EVENT_STORE_UNREACHABLE
from rxmesh.diagnosis._monitor import LoopStall
from rxmesh.exceptions import StoreError
from rxmesh.faults import is_store_unreachable
from tests.diagnosis.conftest import FakeClock, FakeLoop, SerializedLog

MESSAGE = "store 'postgres@db:5432' unreachable while creating 'a/b'"
ADJACENCY_FIELDS = {"stall_seconds", "stall_ended_before_seconds", "stall_gc_seconds"}


def _connect_fault() -> StoreError:
    try:
        try:
            raise TimeoutError("timed out")
        except TimeoutError as exc:
            raise StoreError(
                "could not connect to 10.42.18.4:5432", sqlstate="08001", store="postgres@db:5432"
            ) from exc
    except StoreError as err:
        return err


def _terminal_arm(exc: BaseException) -> StoreUnreachableReport:
    """What a node operation's terminal arm does with an unreachable store: classify, report."""
    assert is_store_unreachable(exc)
    return report_store_unreachable(
        MESSAGE, store="postgres@db:5432", operation="create", path="a/b"
    )


@contextmanager
def _monitoring(clock: FakeClock, loop: FakeLoop) -> Iterator[LoopStallMonitor]:
    """A stall monitor on the fake loop, stopped after."""
    monitor = LoopStallMonitor(clock=clock)
    monitor.start(loop=loop)  # type: ignore[arg-type]
    try:
        yield monitor
    finally:
        monitor.stop()


def _stall(monitor: LoopStallMonitor, clock: FakeClock, loop: FakeLoop, late: float) -> None:
    clock.advance(1.0 + late)
    loop.fire()


def test_describe_is_the_spec_sentence() -> None:
    assert StallAdjacency(duration=3.2, ended_before=0.3, gc_seconds=0.4).describe() == (
        "this process's event loop stalled 3.2 s, ending 0.3 s before this fault "
        "— check this process before the database"
    )


def test_as_log_fields_are_the_stable_structured_names() -> None:
    fields = StallAdjacency(duration=3.2, ended_before=0.3, gc_seconds=0.4).as_log_fields()
    assert fields == {
        "stall_seconds": 3.2,
        "stall_ended_before_seconds": 0.3,
        "stall_gc_seconds": 0.4,
    }


def test_with_stall_adjacency_appends_the_sentence_and_leaves_text_alone_without_one() -> None:
    adjacency = StallAdjacency(duration=3.2, ended_before=0.3, gc_seconds=0.0)
    assert with_stall_adjacency(MESSAGE, adjacency) == f"{MESSAGE}; {adjacency.describe()}"
    assert with_stall_adjacency(MESSAGE, None) == MESSAGE


def test_no_monitor_means_no_adjacency() -> None:
    assert stall_adjacency() is None


def test_a_stall_ending_within_the_shadow_is_adjacent(
    clock: FakeClock, fake_loop: FakeLoop
) -> None:
    with _monitoring(clock, fake_loop) as monitor:
        _stall(monitor, clock, fake_loop, late=3.2)
        clock.advance(0.3)
        adjacency = stall_adjacency()
    assert adjacency is not None
    assert adjacency.duration == pytest.approx(3.2)
    assert adjacency.ended_before == pytest.approx(0.3)
    assert adjacency.describe().startswith("this process's event loop stalled 3.2 s, ending 0.3 s")


@pytest.mark.parametrize(("after", "adjacent"), [(5.0, True), (5.01, False), (60.0, False)])
def test_the_shadow_is_five_seconds_inclusive(
    clock: FakeClock, fake_loop: FakeLoop, after: float, adjacent: bool
) -> None:
    monitor = LoopStallMonitor(tick=100.0, clock=clock)  # no tick due in the way
    monitor.start(loop=fake_loop)  # type: ignore[arg-type]
    try:
        clock.advance(100.0 + 3.0)
        fake_loop.fire()
        clock.advance(after)
        assert (stall_adjacency() is not None) is adjacent
    finally:
        monitor.stop()


def test_the_stall_closest_before_the_fault_is_named(clock: FakeClock, fake_loop: FakeLoop) -> None:
    with _monitoring(clock, fake_loop) as monitor:
        _stall(monitor, clock, fake_loop, late=9.0)
        _stall(monitor, clock, fake_loop, late=0.0)  # an on-time tick in between
        _stall(monitor, clock, fake_loop, late=2.5)  # ends 0.0 s before "now"
        adjacency = stall_adjacency()
        # a fault timed before the last stall ended is not blamed on it
        earlier = stall_adjacency(at=clock.now - 2.0)
    assert adjacency is not None
    assert adjacency.duration == pytest.approx(2.5)
    assert adjacency.ended_before == 0.0
    assert earlier is not None
    assert earlier.duration == pytest.approx(9.0)


def test_the_closest_stall_across_monitors_is_named_when_no_loop_runs(
    clock: FakeClock,
) -> None:
    loops = [FakeLoop(), FakeLoop()]
    monitors = [LoopStallMonitor(tick=1.0, clock=clock), LoopStallMonitor(tick=6.0, clock=clock)]
    for monitor, loop in zip(monitors, loops, strict=True):
        monitor.start(loop=loop)  # type: ignore[arg-type]
    try:
        _stall(monitors[0], clock, loops[0], late=4.0)  # ends at +5.0
        clock.advance(3.6)
        loops[1].fire()  # due at +6.0, arrives at +8.6: 2.6 s late, ends 3.6 s after the first
        adjacency = stall_adjacency()
    finally:
        for monitor in monitors:
            monitor.stop()
    assert adjacency is not None
    assert adjacency.duration == pytest.approx(2.6)
    assert adjacency.ended_before == 0.0


async def test_the_monitor_of_the_running_loop_is_asked_before_others(
    clock: FakeClock, fake_loop: FakeLoop
) -> None:
    other = LoopStallMonitor(clock=clock)
    other.start(loop=fake_loop)  # type: ignore[arg-type]
    own = LoopStallMonitor(tick=1000.0, clock=clock)  # on the running loop; never ticks here
    own.start()
    try:
        _stall(other, clock, fake_loop, late=4.0)  # a stall of ANOTHER loop
        assert stall_adjacency() is None  # not this loop's stall
        clock.advance(1000.0 - 5.0 + 2.5)  # own tick was due at +1000: now 2.5 s late
        adjacency = stall_adjacency()  # this loop's overdue tick is recorded, then found
    finally:
        own.stop()
        other.stop()
    assert adjacency is not None
    assert adjacency.duration == pytest.approx(2.5)
    assert adjacency.ended_before == 0.0


def test_the_report_logs_at_error_with_the_event_and_the_adjacency_bound(
    clock: FakeClock, fake_loop: FakeLoop, rxmesh_log: SerializedLog
) -> None:
    with _monitoring(clock, fake_loop) as monitor:
        _stall(monitor, clock, fake_loop, late=3.2)
        clock.advance(0.3)
        report = _terminal_arm(_connect_fault())
    expected = (
        f"{MESSAGE}; this process's event loop stalled 3.2 s, ending 0.3 s before this fault "
        "— check this process before the database"
    )
    assert report.text == expected
    stall_record, record = rxmesh_log.records()
    assert stall_record["extra"]["event"] == "loop_stall"
    assert record["level"]["name"] == "ERROR"
    assert record["message"] == expected
    assert record["name"] == "rxmesh.diagnosis._adjacency"  # under rxmesh: enable/disable apply
    extra = record["extra"]
    assert extra["event"] == EVENT_STORE_UNREACHABLE
    assert (extra["store"], extra["operation"], extra["path"]) == (
        "postgres@db:5432",
        "create",
        "a/b",
    )
    assert extra["stall_seconds"] == pytest.approx(3.2)
    assert extra["stall_ended_before_seconds"] == pytest.approx(0.3)
    assert extra["stall_gc_seconds"] == 0.0


def test_a_report_without_a_preceding_stall_carries_no_adjacency(
    clock: FakeClock, fake_loop: FakeLoop, rxmesh_log: SerializedLog
) -> None:
    with _monitoring(clock, fake_loop) as monitor:
        _stall(monitor, clock, fake_loop, late=0.5)  # late, but not a stall
        report = _terminal_arm(_connect_fault())
    assert report == StoreUnreachableReport(text=MESSAGE, adjacency=None)
    (record,) = rxmesh_log.records()
    assert record["message"] == MESSAGE
    assert record["extra"]["event"] == EVENT_STORE_UNREACHABLE
    assert not ADJACENCY_FIELDS & record["extra"].keys()


async def test_a_connect_fault_right_after_a_blocked_loop_is_reported_with_the_adjacency(
    rxmesh_log: SerializedLog,
) -> None:
    loop = asyncio.get_running_loop()
    stalled: asyncio.Future[LoopStall] = loop.create_future()
    monitor = LoopStallMonitor(tick=0.05, late_threshold=0.3, on_stall=stalled.set_result)
    monitor.start()
    try:
        loop.call_soon(time.sleep, 0.5)  # a synchronous sleep inside a callback
        await asyncio.wait_for(stalled, timeout=3.0)
        report = _terminal_arm(_connect_fault())
    finally:
        monitor.stop()
    assert report.adjacency is not None
    assert 0.3 < report.adjacency.duration <= 0.55
    assert report.adjacency.ended_before < 0.1
    assert "check this process before the database" in report.text
    assert report.text.startswith(f"{MESSAGE}; this process's event loop stalled 0.")

    # the serialized log reads back through triage as one stall and one event right after it
    result = triage(rxmesh_log.lines())
    assert (result.stalls, result.unreachable, result.adjacent_count, result.malformed) == (
        1,
        1,
        1,
        (),
    )


async def test_the_same_connect_fault_without_a_stall_is_reported_without_one(
    rxmesh_log: SerializedLog,
) -> None:
    monitor = LoopStallMonitor(tick=0.05, late_threshold=0.3)
    monitor.start()
    try:
        await asyncio.sleep(0.12)
        report = _terminal_arm(_connect_fault())
    finally:
        monitor.stop()
    assert report.adjacency is None
    assert report.text == MESSAGE
    assert "stalled" not in rxmesh_log.lines()[-1]


async def test_a_fault_handled_before_the_late_tick_still_sees_the_stall() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[int, StoreUnreachableReport]] = loop.create_future()
    monitor = LoopStallMonitor(tick=0.05, late_threshold=0.3)

    def fault_handler() -> None:  # due before the monitor's tick: runs first after the block
        stalls_seen_before = monitor.statistics().stalls
        done.set_result((stalls_seen_before, _terminal_arm(_connect_fault())))

    monitor.start()
    try:
        loop.call_soon(time.sleep, 0.5)
        loop.call_later(0.01, fault_handler)
        stalls_before, report = await asyncio.wait_for(done, timeout=3.0)
    finally:
        monitor.stop()
    assert stalls_before == 0  # the tick had not run yet
    assert report.adjacency is not None
    assert report.adjacency.duration > 0.3
    assert monitor.statistics().stalls == 1  # recorded once, not again by the late tick


def test_loguru_serializes_time_and_extra_where_triage_reads_them(
    rxmesh_log: SerializedLog,
) -> None:
    report_store_unreachable(MESSAGE)
    (line,) = rxmesh_log.lines()
    import json

    obj = json.loads(line)
    assert set(obj) == {"text", "record"}
    assert isinstance(obj["record"]["time"]["timestamp"], float)
    assert obj["record"]["extra"] == {"event": "store_unreachable"}
    assert triage([line]).unreachable == 1
