"""LoopStallMonitor: a cheap ticker that notices when this process's event loop stalled.

A connect timeout is wall-clock: it keeps running while the loop is blocked or the interpreter is
collecting garbage. The monitor records those stalls so a store-unreachable report can say whether
this process, rather than the store, is the likelier culprit.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loguru import logger

from rxmesh._util.arguments import at_least, positive_seconds
from rxmesh.diagnosis._fields import (
    DEFAULT_HISTORY,
    DEFAULT_LATE_THRESHOLD_SECONDS,
    DEFAULT_TICK_SECONDS,
    EVENT_LOOP_STALL,
    FIELD_EVENT,
    FIELD_STALL_GC_SECONDS,
    FIELD_STALL_SECONDS,
)
from rxmesh.instrumentation import _events
from rxmesh.instrumentation import _seam as _instrumentation

__all__ = ["LoopStallMonitor", "LoopStallStatistics"]


@dataclass(frozen=True, slots=True)
class LoopStall:
    """One stall: a tick that arrived more than the threshold late.

    Attributes:
        ended_at: when the late tick arrived, on the monitor's clock (the end of the stall).
        duration: how late the tick was, in seconds. A lower bound of the time the loop was
            blocked (the block may have started up to one tick period earlier).
        gc_seconds: garbage-collection pause time measured since the previous tick.
    """

    ended_at: float
    duration: float
    gc_seconds: float

    @property
    def started_at(self) -> float:
        """``ended_at - duration`` on the monitor's clock."""
        return self.ended_at - self.duration


@dataclass(frozen=True, slots=True)
class LoopStallStatistics:
    """A snapshot of a monitor, from :meth:`LoopStallMonitor.statistics`."""

    running: bool
    tick_seconds: float
    late_threshold_seconds: float
    ticks: int
    stalls: int
    stalls_remembered: int
    longest_stall_seconds: float
    total_stall_seconds: float
    gc_collections: int
    gc_seconds: float
    last_stall: LoopStall | None


_active: list[LoopStallMonitor] = []
_active_lock = threading.Lock()


def active_monitors() -> tuple[LoopStallMonitor, ...]:
    """The running monitors of this process, most recently started first."""
    with _active_lock:
        return tuple(reversed(_active))


class LoopStallMonitor:
    """Ticks on an asyncio loop every ``tick`` seconds and records ticks that arrive late.

    A stall is a tick more than ``late_threshold`` seconds late; it is remembered (the last
    ``history`` of them), logged at WARNING ("event loop stalled for 3.2 s (gc 0.4 s)") with
    ``event="loop_stall"``, ``stall_seconds`` and ``stall_gc_seconds`` bound, and passed to
    ``on_stall``. Garbage-collection pauses are measured with :data:`gc.callbacks`.

    Cost on an idle loop: one timer callback and a clock read per tick, two ``perf_counter``
    calls per collection (see ``bench/diagnosis.py``).

    Args:
        tick: the tick period in seconds.
        late_threshold: a tick later than this is a stall.
        history: how many stalls to remember.
        clock: the time source (seconds, monotonic); injectable for tests. It must agree with the
            loop's clock in real use, because ticks are scheduled with ``loop.call_later``.
        gc_clock: the time source that GC pauses are measured with; injectable for tests.
        on_stall: called with each stall, on the loop, after it is recorded.

    Example:
        >>> async def main() -> None:  # doctest: +SKIP
        ...     monitor = LoopStallMonitor()
        ...     monitor.start()
        ...     try:
        ...         await serve()
        ...     finally:
        ...         monitor.stop()
    """

    def __init__(
        self,
        tick: float = DEFAULT_TICK_SECONDS,
        late_threshold: float = DEFAULT_LATE_THRESHOLD_SECONDS,
        *,
        history: int = DEFAULT_HISTORY,
        clock: Callable[[], float] = time.monotonic,
        gc_clock: Callable[[], float] = time.perf_counter,
        on_stall: Callable[[LoopStall], None] | None = None,
    ) -> None:
        self._tick = positive_seconds("tick", tick)
        self._late_threshold = positive_seconds("late_threshold", late_threshold)
        at_least("history", history, 1)
        self._clock = clock
        self._gc_clock = gc_clock
        self._on_stall = on_stall
        self._stalls: deque[LoopStall] = deque(maxlen=history)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._ticks = 0
        self._stall_count = 0
        self._longest = 0.0
        self._total = 0.0
        self._gc_started: float | None = None
        self._gc_pending = 0.0
        self._gc_total = 0.0
        self._gc_collections = 0

    @property
    def clock(self) -> Callable[[], float]:
        """The monitor's time source; stall times are on this clock."""
        return self._clock

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop being watched, or ``None`` when stopped."""
        return self._loop

    @property
    def running(self) -> bool:
        """Whether :meth:`start` was called and :meth:`stop` was not."""
        return self._loop is not None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start ticking on ``loop`` (default: the running loop); call it from the loop's thread.

        Raises:
            RuntimeError: when already running, or when no loop is given and none is running.
        """
        if self._loop is not None:
            raise RuntimeError("LoopStallMonitor is already running")
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._due = self._clock() + self._tick
        self._handle = self._loop.call_later(self._tick, self._on_tick)
        gc.callbacks.append(self._on_gc)
        with _active_lock:
            _active.append(self)

    def stop(self) -> None:
        """Stop ticking; the history stays readable. Idempotent."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        with _active_lock:
            if self in _active:
                _active.remove(self)
        self._loop = None
        self._thread = None

    def check(self) -> LoopStall | None:
        """Record an overdue tick now, if it is already later than the threshold.

        A fault handler can run before the late tick in the same loop iteration; calling this
        first makes the stall that just ended visible to it. Acts only from the loop's thread
        while running; returns the stall recorded, or ``None``.
        """
        if self._loop is None or threading.get_ident() != self._thread:
            return None
        now = self._clock()
        if now - self._due <= self._late_threshold:
            return None
        if self._handle is not None:
            self._handle.cancel()
        stall = self._arrive(now)
        self._handle = self._loop.call_later(self._tick, self._on_tick)
        self._notify(stall)
        return stall

    def stalls(self) -> tuple[LoopStall, ...]:
        """The remembered stalls, oldest first."""
        return tuple(self._stalls)

    def last_stall_before(self, at: float, shadow: float) -> LoopStall | None:
        """The latest stall that ended within ``shadow`` seconds before ``at`` (both inclusive)."""
        for stall in reversed(self._stalls):
            before = at - stall.ended_at
            if before < 0:
                continue
            if before > shadow:
                return None
            return stall
        return None

    def statistics(self) -> LoopStallStatistics:
        """A frozen snapshot of what the monitor has seen."""
        return LoopStallStatistics(
            running=self.running,
            tick_seconds=self._tick,
            late_threshold_seconds=self._late_threshold,
            ticks=self._ticks,
            stalls=self._stall_count,
            stalls_remembered=len(self._stalls),
            longest_stall_seconds=self._longest,
            total_stall_seconds=self._total,
            gc_collections=self._gc_collections,
            gc_seconds=self._gc_total,
            last_stall=self._stalls[-1] if self._stalls else None,
        )

    def _on_tick(self) -> None:
        self._handle = None
        if self._loop is None:
            return
        stall = self._arrive(self._clock())
        self._handle = self._loop.call_later(self._tick, self._on_tick)  # re-armed before on_stall
        self._notify(stall)

    def _notify(self, stall: LoopStall | None) -> None:
        if stall is not None and self._on_stall is not None:
            self._on_stall(stall)

    def _arrive(self, now: float) -> LoopStall | None:
        late = now - self._due
        gc_seconds = self._gc_pending
        self._gc_pending = 0.0
        self._due = now + self._tick
        self._ticks += 1
        if late <= self._late_threshold:
            return None
        stall = LoopStall(ended_at=now, duration=late, gc_seconds=gc_seconds)
        self._stalls.append(stall)
        self._stall_count += 1
        self._total += late
        self._longest = max(self._longest, late)
        logger.bind(
            **{
                FIELD_EVENT: EVENT_LOOP_STALL,
                FIELD_STALL_SECONDS: late,
                FIELD_STALL_GC_SECONDS: gc_seconds,
            }
        ).warning("event loop stalled for {:.1f} s (gc {:.1f} s)", late, gc_seconds)
        if _instrumentation.enabled:
            _instrumentation.emit(_events.LoopStalled(seconds=late, gc_seconds=gc_seconds))
        return stall

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = self._gc_clock()
        elif phase == "stop" and self._gc_started is not None:
            spent = self._gc_clock() - self._gc_started
            self._gc_started = None
            self._gc_pending += spent
            self._gc_total += spent
            self._gc_collections += 1
