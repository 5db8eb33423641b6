"""The order of re-issue: the intents of one path one after another, in the order recorded."""

from __future__ import annotations

from collections import deque

from rxmesh.ledger._models import PendingWrite

__all__ = ["PathOrder"]


class PathOrder:
    """Per path, its taken intents in the order they were recorded (the ledger's sequence).

    Only the head of every chain an intent is in (a move: its source's and its target's) may run:
    it is then :attr:`ready`. Different paths run concurrently. Not thread-safe: the recovery
    calls it under its lock.
    """

    def __init__(self) -> None:
        self._chains: dict[str, deque[PendingWrite]] = {}
        self.ready: deque[PendingWrite] = deque()  # heads of all their chains, not started
        self.queued = 0  # taken, not started (ready or behind another of their path)

    def add(self, intent: PendingWrite) -> None:
        """Queue ``intent`` behind the taken intents of its paths."""
        self.queued += 1
        for path in _paths(intent):
            self._chains.setdefault(path, deque()).append(intent)
        if self._at_head(intent):
            self.ready.append(intent)

    def take(self) -> PendingWrite:
        """The next ready intent (it runs, or is :meth:`release`-d at once)."""
        self.queued -= 1
        return self.ready.popleft()

    def release(self, intent: PendingWrite) -> None:
        """``intent`` is settled (or will not run): the next intent of each of its paths may
        run once it heads every chain it is in."""
        for path in _paths(intent):
            chain = self._chains[path]
            assert chain[0] is intent  # only a chain's head runs
            chain.popleft()
            if not chain:
                del self._chains[path]
            elif self._at_head(chain[0]):
                self.ready.append(chain[0])

    def clear(self, running: list[PendingWrite]) -> list[PendingWrite]:
        """Forget every chain; return the intents queued (not in ``running``), once each."""
        ids = {id(intent) for intent in running}
        queued = {
            id(intent): intent
            for chain in self._chains.values()
            for intent in chain
            if id(intent) not in ids
        }
        self._chains.clear()
        self.ready.clear()
        self.queued = 0
        return list(queued.values())

    def _at_head(self, intent: PendingWrite) -> bool:
        return all(self._chains[path][0] is intent for path in _paths(intent))


def _paths(intent: PendingWrite) -> tuple[str, ...]:
    """The paths whose order ``intent`` keeps: its node's, and a move's target."""
    if intent.target is None or intent.target == intent.path:
        return (intent.path,)
    return intent.path, intent.target
