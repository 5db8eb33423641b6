"""The embedded store's update, delete and move, each a compare-and-set when given a basis.

Private to :mod:`rxmesh.providers.memory` (a mixin of :class:`~rxmesh.providers.InMemoryStore`,
kept apart so each module stays small). A basis is the version the request was based on and,
optionally, the request id of the write that produced it; a row that is not that row any more
raises :class:`~rxmesh.exceptions.StoreVersionConflictError` and nothing changes. The request id
given to an update or move becomes the row's, so its re-issue recognises its own landed write.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

from rxmesh.exceptions import StoreConflictError, StoreVersionConflictError
from rxmesh.model import MeshNode, NodeChange, partition_of
from rxmesh.providers._memory_positions import ChangePositions

__all__ = ["MemoryVerbs", "WriteAttempt", "own_write", "version_conflict"]


class WriteAttempt(NamedTuple):
    """One write-type operation attempted on the store: ``(op, path)``.

    ``op`` is ``"write"``, ``"write_many"`` (one entry per node), ``"update"``, ``"delete"`` or
    ``"move"`` (two entries: the source path, then the target path).
    """

    op: str
    path: str


def version_conflict(
    store: str, path: str, expected_version: int, existing: MeshNode | None
) -> StoreVersionConflictError:
    """The compare-and-set refusal for ``path`` (``existing``: the row as it is, if any)."""
    now = (
        "gone"
        if existing is None
        else (f"at version {existing.version} (request {existing.request_id!r})")
    )
    return StoreVersionConflictError(
        f"compare-and-set refused at '{path}' in store '{store}': the request was based on "
        f"version {expected_version}, the row is {now}; another write came first",
        path=path,
        expected_version=expected_version,
        actual_version=None if existing is None else existing.version,
        actual_request_id=None if existing is None else existing.request_id,
        store=store,
    )


def own_write(row: MeshNode, request_id: str, expected_version: int | None) -> bool:
    """Whether ``row`` is what an update or move with ``request_id`` wrote (an earlier try).

    The id alone does not say it: a create leaves its id on the row too (version 1), and an id
    may be reused. An update or move writes the version after its basis: with a basis exactly
    that one, without one never version 1.
    """
    if row.request_id != request_id:
        return False
    if expected_version is not None:
        return row.version == expected_version + 1
    return row.version > 1


class MemoryVerbs:
    """Update, delete and move of :class:`~rxmesh.providers.InMemoryStore`."""

    _lock: threading.RLock
    _name: str
    _partitions: dict[str, dict[str, MeshNode]]
    _conflicts: int
    _positions: ChangePositions
    write_log: list[WriteAttempt]

    def _get(self, path: str) -> MeshNode | None:
        raise NotImplementedError

    def _upsert(self, node: MeshNode) -> NodeChange:
        raise NotImplementedError

    def _publish(self, changes: Sequence[NodeChange], last: int) -> None:
        raise NotImplementedError

    def _conflict(self, path: str, existing: MeshNode, what: str) -> StoreConflictError:
        raise NotImplementedError

    def _check_basis(
        self,
        path: str,
        existing: MeshNode,
        expected_version: int | None,
        expected_request_id: str | None,
    ) -> None:
        """Compare-and-set: refuse (changing nothing) unless ``existing`` is the expected row."""
        if expected_version is None:
            return
        if existing.version == expected_version and (
            expected_request_id is None or existing.request_id == expected_request_id
        ):
            return
        self._conflicts += 1
        raise version_conflict(self._name, path, expected_version, existing)

    async def update(
        self,
        node: MeshNode,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """Replace the type and content of the node at ``node.path`` (version + 1).

        Keeps the stored ``created_by`` and ``created_at``; ``request_id`` (when given) becomes
        the row's: the id of its last write. A row that already carries ``request_id`` is this
        request's own landed update and is returned unchanged. With ``expected_version`` the update
        is a compare-and-set: a row at another version (or, with ``expected_request_id``, written
        by another request) raises :class:`StoreVersionConflictError`. ``None`` if absent.
        """
        with self._lock:
            self.write_log.append(WriteAttempt("update", node.path))
            existing = self._get(node.path)
            if existing is None:
                return None
            if request_id is not None and own_write(existing, request_id, expected_version):
                return existing  # this request's update did land: not a new commit
            self._check_basis(node.path, existing, expected_version, expected_request_id)
            changed: dict[str, object] = {
                "node_type": node.node_type,
                "content": node.content,
                "version": existing.version + 1,
            }
            if request_id is not None:
                changed["request_id"] = request_id
            stored = existing.model_copy(update=changed)
            change = self._upsert(stored)
            last = self._positions.current
        self._publish([change], last)
        return stored

    async def delete(
        self,
        path: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
    ) -> bool:
        """Delete the node at ``path`` (not its children); ``False`` if it was absent.

        With ``expected_version``: a compare-and-set, as for :meth:`update`.
        """
        with self._lock:
            self.write_log.append(WriteAttempt("delete", path))
            table = self._partitions.get(partition_of(path))
            existing = None if table is None else table.get(path)
            if existing is None or table is None:
                return False
            self._check_basis(path, existing, expected_version, expected_request_id)
            del table[path]
            self._positions.removed(path)
            last = self._positions.current
        self._publish(
            [
                NodeChange.model_construct(
                    source=self._name, op="delete", path=path, version=existing.version
                )
            ],
            last,
        )
        return True

    async def move(
        self,
        source: str,
        target: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """Move the node at ``source`` to the free path ``target`` (version + 1), atomically.

        ``None`` if ``source`` is absent; a taken ``target`` errors with
        :class:`StoreConflictError` and changes nothing. Children do not move. ``request_id``
        (when given) becomes the moved row's; a ``target`` that already carries it, with
        ``source`` gone, is this request's own landed move and is returned. With
        ``expected_version`` the source is compared-and-set, as for :meth:`update`.
        """
        with self._lock:
            self.write_log.append(WriteAttempt("move", source))
            self.write_log.append(WriteAttempt("move", target))
            existing = self._get(source)
            taken = self._get(target)
            if existing is None:
                if (
                    taken is not None
                    and request_id is not None
                    and own_write(taken, request_id, expected_version)
                ):
                    return taken  # this request's move did land
                return None
            self._check_basis(source, existing, expected_version, expected_request_id)
            if taken is not None:
                raise self._conflict(target, taken, f"move of '{source}' refused")
            del self._partitions[partition_of(source)][source]
            self._positions.removed(source)
            changed: dict[str, object] = {"path": target, "version": existing.version + 1}
            if request_id is not None:
                changed["request_id"] = request_id
            moved = existing.model_copy(update=changed)
            removal = NodeChange.model_construct(
                source=self._name, op="delete", path=source, version=existing.version
            )
            change = self._upsert(moved)
            last = self._positions.current
        self._publish([removal, change], last)
        return moved
