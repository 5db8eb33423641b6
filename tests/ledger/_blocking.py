"""A gate on ``os.fdatasync``: the journal writer's group commit waits until the test opens it."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable

BOUND = 10.0  # seconds; every wait of these tests is bounded


class FdatasyncGate:
    """Counts ``fdatasync`` calls; while closed, each call blocks (on the writer thread)."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self._open = threading.Event()
        self._open.set()
        self.fail_with: OSError | None = None
        self._real: Callable[[int], None] = os.fdatasync

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        if not self._open.wait(BOUND):
            raise AssertionError("the test never opened the fdatasync gate")
        if self.fail_with is not None:
            raise self.fail_with
        self._real(fd)

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def close(self) -> None:
        self.entered.clear()
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    async def wait_entered(self) -> None:
        """Until the writer thread is inside ``fdatasync`` (bounded)."""
        if not await asyncio.to_thread(self.entered.wait, BOUND):
            raise AssertionError("the writer never reached fdatasync")
