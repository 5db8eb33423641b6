"""The incremental snapshot of a live query: what folding its frames keeps, one delta at a time.

:class:`~rxmesh.cache.SyncedQueryCache` keeps one per chain for ``replay=fold_query_frames``. The
cache multicasts any observable under any key; this module knows what a live query's frames mean
(an Initial replaces, a Delta removes then upserts, the order is by path), so the two are apart.
"""

from __future__ import annotations

from rxmesh._util.path_order import PathOrdered
from rxmesh.model import FrameKind, MeshNode, QueryFrame

__all__ = ["QuerySnapshot"]


class QuerySnapshot:
    """The state of :func:`fold_query_frames`, kept incrementally: nodes by path, plus the path
    order of the last materialised Initial.

    :meth:`fold` costs O(rows in the frame); :meth:`value` materialises the ordered Initial only
    when asked (a late subscriber joining) and keeps it until the next fold, merging the paths
    added since into the kept order (a linear merge, not a re-sort of everything).
    """

    __slots__ = ("_added", "_nodes", "_order", "_removed", "_template", "_token", "_value")

    def __init__(self, frame: QueryFrame) -> None:
        self._reset(frame)

    def _reset(self, frame: QueryFrame) -> None:
        self._value: QueryFrame | None = frame
        self._token = frame.resume_token
        """The latest folded frame's token: where the materialised snapshot stands."""
        self._added: list[str] = []
        self._removed = 0
        self._template: QueryFrame | None = None
        self._nodes: dict[str, MeshNode] | None = None
        """The nodes by path; ``None`` until the first delta (the Initial is replayed as it came
        until then, so a large Initial reaches its subscribers without this pass first)."""
        self._order: list[str] | None = None
        """The path order of the last materialised Initial; ``None``: not worked out yet (the
        Initial itself is replayed until the first delta)."""
        if frame.kind is FrameKind.INITIAL:  # a Delta with no Initial before it is replayed as is
            self._template = frame

    def _by_path(self) -> dict[str, MeshNode]:
        """The nodes by path, made from the Initial at the first delta."""
        nodes = self._nodes
        if nodes is None:
            assert self._template is not None
            initial = self._template.nodes
            nodes = self._nodes = {node.path: node for node in initial}
            if isinstance(initial, PathOrdered):
                self._order = list(nodes)  # its order is the path order: nothing to sort
        return nodes

    def fold(self, frame: QueryFrame) -> None:
        """Apply ``frame``: an Initial replaces the state; a Delta removes, then upserts."""
        if frame.kind is FrameKind.INITIAL or self._template is None:
            self._reset(frame)
            return
        nodes = self._by_path()
        for path in frame.removed:
            if nodes.pop(path, None) is not None:
                self._removed += 1
        for node in frame.nodes:
            if node.path not in nodes:
                self._added.append(node.path)
            nodes[node.path] = node
        self._token = frame.resume_token
        self._value = None

    def size(self) -> int:
        """Rows in the snapshot now."""
        if self._nodes is None:
            return len(self._template.nodes) if self._template is not None else 0
        return len(self._nodes)

    def value(self) -> QueryFrame:
        """The snapshot as one Initial ordered by path, at the latest frame's ``resume_token``
        (the state's other fields kept)."""
        if self._value is not None:
            return self._value
        assert self._template is not None  # only a fold of a Delta into an Initial clears it
        nodes = self._by_path()
        order = self._order
        if order is None:
            order = sorted(nodes)  # once; linear on an Initial that came ordered
        else:
            added = set(self._added)
            if self._removed:  # a removed path may also be back among the added ones
                order = [path for path in order if path in nodes and path not in added]
            if added:
                order.extend(sorted(path for path in added if path in nodes))
                order.sort()  # two ordered runs: timsort merges them in linear time
        self._order, self._added, self._removed = order, [], 0
        self._value = self._template.model_copy(
            update={
                "nodes": PathOrdered.of_sorted(nodes[path] for path in order),
                "resume_token": self._token,
            }
        )
        return self._value
