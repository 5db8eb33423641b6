"""Fixtures for diagnosis tests: a captured serialized loguru log, a fake loop and clocks."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from loguru import logger

from rxmesh.diagnosis._monitor import active_monitors


class SerializedLog:
    """The rxmesh records written while a test ran, exactly as loguru serializes them."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line)["record"] for line in self.lines()]


@pytest.fixture
def rxmesh_log() -> Iterator[SerializedLog]:
    """Enable rxmesh logging into a serialize=True sink for the test's duration."""
    log = SerializedLog()
    logger.enable("rxmesh")
    sink = logger.add(log.stream, serialize=True, filter="rxmesh", level="DEBUG")
    try:
        yield log
    finally:
        logger.remove(sink)
        logger.disable("rxmesh")


@pytest.fixture(autouse=True)
def no_monitor_leaks() -> Iterator[None]:
    """Every test stops what it starts; a leaked monitor would answer another test's question."""
    yield
    leaked = active_monitors()
    for monitor in leaked:
        monitor.stop()
    assert not leaked, f"monitors left running: {leaked}"


class FakeClock:
    """A settable monotonic clock."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeHandle:
    def __init__(self, loop: FakeLoop, callback: Callable[[], None]) -> None:
        self.loop = loop
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """Stands in for an asyncio loop: records ``call_later`` and fires it on demand."""

    def __init__(self) -> None:
        self.handles: list[FakeHandle] = []
        self.delays: list[float] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeHandle:
        handle = FakeHandle(self, callback)
        self.handles.append(handle)
        self.delays.append(delay)
        return handle

    def pending(self) -> list[FakeHandle]:
        return [h for h in self.handles if not h.cancelled]

    def fire(self) -> None:
        """Run the one pending timer callback (the monitor's next tick)."""
        (handle,) = self.pending()
        handle.cancelled = True
        handle.callback()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake_loop() -> FakeLoop:
    return FakeLoop()
