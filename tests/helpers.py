"""Small helpers shared by tests (import them; do not copy them)."""

from __future__ import annotations

import asyncio
from typing import Any

from reactivex import Observable

from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome


async def answers(
    source: Observable[Any], *, timeout: float = 10.0, settle: float = 0.0
) -> list[Any]:
    """Everything ``source`` emitted, its error included, once it ended (at most ``timeout``
    seconds), and whatever arrives within ``settle`` seconds more: a second answer would land
    there. An operation that answers exactly once gives a one-item list."""
    got: list[Any] = []
    done = asyncio.Event()

    def on_error(exc: Exception) -> None:
        got.append(exc)
        done.set()

    subscription = source.subscribe(got.append, on_error, done.set)
    try:
        await asyncio.wait_for(done.wait(), timeout)
        await asyncio.sleep(settle)
    finally:
        subscription.dispose()
    return got


class Outcomes:
    """Collects the outcomes a ledger publishes from now on; :meth:`wait` bounds the wait."""

    def __init__(self, ledger: PendingWriteLedger) -> None:
        self.got: list[PendingWriteOutcome] = []
        self._arrived = asyncio.Event()
        self._subscription = ledger.outcomes.subscribe(self._on_next)

    def _on_next(self, outcome: PendingWriteOutcome) -> None:
        self.got.append(outcome)
        self._arrived.set()

    async def wait(self, count: int, *, timeout: float = 10.0) -> list[PendingWriteOutcome]:
        """Wait until ``count`` outcomes arrived (at most ``timeout`` seconds), then stop."""
        async with asyncio.timeout(timeout):
            while len(self.got) < count:
                self._arrived.clear()
                await self._arrived.wait()
        self._subscription.dispose()
        return self.got
