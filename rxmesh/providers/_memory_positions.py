"""The embedded store's change positions: a sequence number per change, what changed since one,
and the resume tokens that name them.

The store's commits are serialised under its lock, so one counter orders every change: each
row changed (upserted, deleted, moved away) takes the next number. Kept per path: the number of
its last change (existing rows) and, for rows gone, a tombstone ``(path, number)``. Tombstones
are bounded (``retention`` deletions remembered, oldest pruned first); the highest pruned number
is the *horizon*: a position below it cannot say any more what was removed since, so a resume
from there is answered with a reset.

A token reads ``m1.<store instance>.<number>``: the instance is drawn per store object, so a
token of another store (or of this one before a restart) is recognised as foreign and answers a
reset, as does malformed text or a number this store has not reached.

Private to :mod:`rxmesh.providers.memory` (kept apart so each module stays small). Every method
is called with the store's lock held.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable

from rxmesh.model import MeshNode, NodeQuery, partition_of

__all__ = ["DEFAULT_TOMBSTONE_RETENTION", "ChangePositions"]

DEFAULT_TOMBSTONE_RETENTION = 100_000
"""Deletions an embedded store remembers for resumes (a few MB at most)."""

_VERSION = "m1"


def in_scope(query: NodeQuery, path: str) -> bool:
    """Whether ``path`` lies where ``query`` looks (partition and prefix; type and filter are
    properties of a node, which a removed path no longer has)."""
    if query.partition is not None and partition_of(path) != query.partition:
        return False
    prefix = query.path_prefix.rstrip("/")
    return not prefix or path == prefix or path.startswith(prefix + "/")


class ChangePositions:
    """The change order of one embedded store (see the module)."""

    __slots__ = ("_changed", "_horizon", "_instance", "_retention", "_seq", "_tombstones")

    def __init__(self, retention: int) -> None:
        self._instance = uuid.uuid4().hex[:16]
        self._retention = retention
        self._seq = 0
        self._horizon = 0
        # Both ordered by number (a path moves to the end when it changes again), so "since n"
        # walks back from the end and stops at the first older entry: O(changes since n).
        self._changed: OrderedDict[str, int] = OrderedDict()
        self._tombstones: OrderedDict[str, int] = OrderedDict()

    @property
    def current(self) -> int:
        """The number of the latest change (0: nothing changed yet)."""
        return self._seq

    @property
    def horizon(self) -> int:
        """The highest pruned tombstone's number: positions below it answer a reset."""
        return self._horizon

    @property
    def tombstones(self) -> int:
        """Tombstones held now."""
        return len(self._tombstones)

    def changed(self, path: str) -> None:
        """``path`` was written (created, updated, moved to)."""
        self._seq += 1
        self._changed[path] = self._seq
        self._changed.move_to_end(path)
        # Its tombstone, if any, says nothing the change does not: a resume from before it sees
        # the path as changed and reports it (as a node, or removed when it does not match).
        self._tombstones.pop(path, None)

    def removed(self, path: str) -> None:
        """``path`` was deleted (or moved away)."""
        self._seq += 1
        self._changed.pop(path, None)
        self._tombstones[path] = self._seq
        self._tombstones.move_to_end(path)
        while len(self._tombstones) > self._retention:
            _, pruned = self._tombstones.popitem(last=False)
            self._horizon = max(self._horizon, pruned)

    def token(self, seq: int) -> str:
        """The resume token of position ``seq``."""
        return f"{_VERSION}.{self._instance}.{seq}"

    def position(self, token: object) -> int | None:
        """The position ``token`` names, or ``None`` when this store cannot resume from it
        (not text, malformed, another store's, past the horizon, or not reached yet)."""
        if not isinstance(token, str):
            return None
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _VERSION or parts[1] != self._instance:
            return None
        digits = parts[2]
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 20:
            return None
        seq = int(digits)
        if seq < self._horizon or seq > self._seq:
            return None
        return seq

    def since(
        self, query: NodeQuery, seq: int, get: Callable[[str], MeshNode | None]
    ) -> tuple[list[MeshNode], list[str]]:
        """What changed in ``query``'s view after position ``seq``: the matching nodes changed
        since, and the paths removed since (deleted, moved away, or changed so that they no
        longer match). A removed path may never have been in that view: removing what one does
        not hold is harmless, keeping what was deleted is not."""
        nodes: list[MeshNode] = []
        removed: list[str] = []
        for path in reversed(self._changed):
            if self._changed[path] <= seq:
                break
            if not in_scope(query, path):
                continue
            node = get(path)
            if node is not None and query.matches(node):
                nodes.append(node)
            else:
                removed.append(path)
        for path in reversed(self._tombstones):
            if self._tombstones[path] <= seq:
                break
            if in_scope(query, path):
                removed.append(path)
        nodes.reverse()
        removed.reverse()
        return nodes, removed
