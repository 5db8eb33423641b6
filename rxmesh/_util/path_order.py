"""Nodes known to be ordered by path: checked once where a frame is made, not again downstream.

A live query's Initial is ordered by path, and several layers want to know that it is: the
store checks the rows it read (the server's collation is not Python's string order), the fan-in
would check a lone provider's Initial again before forwarding it as is, and the cache's snapshot
wants the order of what it replays. Each check is a pass over every node (docs/performance.md,
"Stop 26"). :class:`PathOrdered` is the tuple a checked sequence becomes: an immutable tuple, so
what was checked stays true, and a layer that receives one skips its own pass.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence

from rxmesh.model import MeshNode

__all__ = ["PathOrdered", "is_path_ordered", "path_ordered", "strictly_ascending"]


class PathOrdered(tuple[MeshNode, ...]):
    """A tuple of nodes strictly ordered by path (so without two of one path).

    Made only by :func:`path_ordered` (which checks) or from nodes sorted and de-duplicated by
    path where they are made. It is a plain tuple to everything else: equal to the tuple of
    the same nodes, serialised, pickled and sliced as one.
    """

    __slots__ = ()

    @classmethod
    def of_sorted(cls, nodes: Iterable[MeshNode]) -> PathOrdered:
        """``nodes``, which the caller made strictly ordered by path (e.g. a dict's values taken
        in ``sorted`` key order); not checked."""
        return cls(nodes)

    def __reduce__(self) -> tuple[type[tuple[MeshNode, ...]], tuple[tuple[MeshNode, ...]]]:
        return (tuple, (tuple(self),))


def strictly_ascending(paths: Sequence[str]) -> bool:
    """Whether ``paths`` are strictly ascending (compared pairwise by C-level ``map``, which
    beats a generator of pairs: docs/performance.md)."""
    return all(map(operator.lt, paths, itertools.islice(paths, 1, None)))


def _strictly_ordered(nodes: Sequence[MeshNode]) -> bool:
    return strictly_ascending([node.path for node in nodes])


def path_ordered(nodes: Sequence[MeshNode]) -> PathOrdered | None:
    """``nodes`` as a :class:`PathOrdered` if they are strictly ordered by path, else ``None``."""
    if isinstance(nodes, PathOrdered):
        return nodes
    return PathOrdered(nodes) if _strictly_ordered(nodes) else None


def is_path_ordered(nodes: Sequence[MeshNode]) -> bool:
    """Whether ``nodes`` are strictly ordered by path: known at once for a :class:`PathOrdered`,
    else checked (one pass)."""
    return isinstance(nodes, PathOrdered) or _strictly_ordered(nodes)
