"""Small helpers shared by tests (import them; do not copy them)."""

from __future__ import annotations

import asyncio

from rxmesh.ledger import PendingWriteLedger, PendingWriteOutcome


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
