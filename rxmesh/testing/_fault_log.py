"""What :class:`~rxmesh.testing.FaultInjectingStore` logs and counts: the operations it met, and
its statistics snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from rxmesh.model import NodeQuery
from rxmesh.testing._feed_gate import FeedMode

__all__ = ["WRITE_OPS", "FaultInjectingStoreStatistics", "Operation", "Target"]

WRITE_OPS: frozenset[str] = frozenset({"write", "write_many", "update", "delete", "move"})
"""The operations that write (the ones :meth:`FaultInjectingStore.refuse_writes_as_unreachable`
refuses)."""

Target = str | tuple[str, ...] | NodeQuery


class Operation(NamedTuple):
    """One operation the store met: ``op``, its ``target`` and what happened to it.

    ``target`` is a path (read, write, update, delete), a tuple of paths (read_many, write_many,
    move as ``(source, target)``) or the :class:`NodeQuery`. ``outcome`` is ``"forwarded"`` (passed
    to the inner store), ``"refused"`` (refused as unreachable), ``"faulted"`` (a read fault),
    ``"doomed"`` (a query set to die mid-stream) or ``"stalled"`` (a query whose Initial is held).
    """

    op: str
    target: Target
    outcome: str

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths this operation touched (empty for a query)."""
        if isinstance(self.target, str):
            return (self.target,)
        if isinstance(self.target, tuple):
            return self.target
        return ()


@dataclass(frozen=True, slots=True)
class FaultInjectingStoreStatistics:
    """A snapshot of a :class:`FaultInjectingStore`'s counters."""

    operations: int
    counts: Mapping[str, int]
    injected: Mapping[str, int]
    feed_mode: FeedMode
    held_events: int
    stalled_queries: int
