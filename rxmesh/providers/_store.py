"""The ``Store`` protocol every provider implements.

Every method returns a COLD observable: nothing happens until it is subscribed, and every
subscription runs the work again (so ``retry_transient_connect`` really retries). ``changes``,
``gaps`` and ``answers_again`` are hot streams of what the store reports.

Coroutine twins: a store MAY also offer ``aread``, ``aread_many``, ``awrite``, ``aupdate``,
``adelete`` and ``amove``, the same operations awaited directly (the mesh's internals call them
through :func:`call`, which falls back to the observable method when a store has no twin). The
bundled stores all do; the twin and the observable run the very same step.

Fault contract: a read returns ``None`` ONLY for a clean absence (including "the partition's
schema does not exist yet"); every fault propagates as an error, never as ``None``. Driver and
network failures are mapped at the provider's boundary to :class:`~rxmesh.exceptions.StoreError`
with the right ``sqlstate`` and ``raise ... from exc``, so :mod:`rxmesh.faults` classifies them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from reactivex import Observable

from rxmesh.aio import first_value
from rxmesh.model import (
    ChangeFeedGap,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
    WindowCommitted,
)

__all__ = ["DEFAULT_WRITE_WINDOW", "Store", "call", "feed_is_whole"]


_TWINS = {
    "read": "aread",
    "read_many": "aread_many",
    "write": "awrite",
    "update": "aupdate",
    "delete": "adelete",
    "move": "amove",
}

DEFAULT_WRITE_WINDOW = 1000
"""Rows per bulk-write window (one transaction each)."""


@runtime_checkable
class Store(Protocol):
    """A place nodes live. See the module docstring for the contract."""

    @property
    def name(self) -> str:
        """A printable name for logs and answers, e.g. ``"postgres@127.0.0.1:5432/test"``."""
        ...

    def read(self, path: str) -> Observable[MeshNode | None]:
        """The node at ``path``, or ``None`` for a clean absence; faults propagate."""
        ...

    def read_many(self, paths: Sequence[str]) -> Observable[dict[str, MeshNode]]:
        """The nodes present among ``paths`` (absent paths are missing from the dict)."""
        ...

    def write(self, node: MeshNode) -> Observable[MeshNode]:
        """Insert ``node`` if its path is free and emit the stored row.

        If a row already exists with the SAME ``request_id`` (an ambiguous commit that did land),
        the existing row is emitted as if written now. A row with another request id errors with
        :class:`~rxmesh.exceptions.StoreConflictError`. Never overwrites.
        """
        ...

    def write_many(
        self, nodes: Sequence[MeshNode], window: int = DEFAULT_WRITE_WINDOW
    ) -> Observable[WindowCommitted]:
        """Insert ``nodes`` in windows: one transaction per window per partition.

        Emits one :class:`WindowCommitted` per committed window, in order; a failing window ends
        the stream with its error (earlier windows stay committed). Rows whose path is taken are
        skipped (``ON CONFLICT DO NOTHING``) and are not listed in ``paths``.
        """
        ...

    def update(
        self,
        node: MeshNode,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> Observable[MeshNode | None]:
        """Replace the content/type of an existing node (version + 1); ``None`` if absent.

        Compare-and-set: with ``expected_version`` (and ``expected_request_id``, the id of the
        write that produced it) a row not at that version, by that write, errors with
        :class:`~rxmesh.exceptions.StoreVersionConflictError` and changes nothing.
        ``request_id`` becomes the row's (the id of its last write); a row already carrying it
        is this request's landed update, emitted unchanged.
        """
        ...

    def delete(
        self,
        path: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
    ) -> Observable[bool]:
        """Delete the node at ``path`` (not its children); ``False`` if it was absent.
        Compare-and-set as :meth:`update`."""
        ...

    def move(
        self,
        source: str,
        target: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> Observable[MeshNode | None]:
        """Move a node to a free path in one transaction; ``None`` if ``source`` is absent.

        A taken target errors with :class:`~rxmesh.exceptions.StoreConflictError`. The source
        is compared-and-set as :meth:`update`; ``request_id`` becomes the moved row's, and a
        target carrying it (the source gone) is this request's landed move, emitted.
        """
        ...

    def query(self, query: NodeQuery) -> Observable[QueryFrame]:
        """One Initial frame (every match), then a Delta per committed change that matches."""
        ...

    @property
    def changes(self) -> Observable[NodeChange]:
        """Hot stream of committed changes, as the change feed reports them."""
        ...

    @property
    def gaps(self) -> Observable[ChangeFeedGap]:
        """Hot stream of declared change-feed gaps (the feed was lost and has resumed)."""
        ...

    @property
    def answers_again(self) -> Observable[StoreEvidence]:
        """Hot stream of evidence that the store answers: gaps declared and commits announced."""
        ...


async def call(store: Store, operation: str, *args: Any) -> Any:
    """Run one store ``operation`` (``"read"``, ``"write"``, ...) and return its result.

    Awaits the store's coroutine twin (``aread`` for ``read``, ...) when it has one, else takes
    the first item of the observable method: one code path for every store, with no observable
    machinery when the store is coroutine-first. A twin is used only where it runs the same
    step as the observable method: a subclass (or an instance) that overrides ``write`` but not
    ``awrite`` gets its ``write`` called. Errors propagate unchanged.
    """
    twin = _twin(store, operation)
    if twin is not None:
        return await twin(*args)
    return await first_value(getattr(store, operation)(*args))


def feed_is_whole(store: object) -> bool:
    """Whether ``store``'s change feed reports every committed change right now.

    A store says so with a ``feed_is_whole`` property (the embedded store: always; the fault
    injector: while its feed is neither held nor dropped, and its inner store's is whole) or
    with ``feed_statistics().state`` (the PostgreSQL store: while it is listening). A store that
    says neither is not trusted: whatever depends on the feed alone must read instead.
    """
    whole = getattr(store, "feed_is_whole", None)
    if isinstance(whole, bool):
        return whole
    statistics = getattr(store, "feed_statistics", None)
    if callable(statistics):
        return str(statistics().state) == "listening"
    return False


def _twin(store: object, operation: str) -> Any:
    name = _TWINS[operation]
    own = getattr(store, "__dict__", {})
    if name in own:
        return own[name]
    kind: Any = type(store)  # a class is hashable; mypy's view of type[object] is not
    if operation in own or not _class_twin(kind, operation):
        return None
    return getattr(store, name)


@functools.cache
def _class_twin(cls: type, operation: str) -> bool:
    """Whether ``cls``'s coroutine twin of ``operation`` is at least as derived as the observable
    method (so an override of the observable method alone is honoured)."""

    def owner(name: str) -> type | None:
        return next((klass for klass in cls.__mro__ if name in vars(klass)), None)

    observable, twin = owner(operation), owner(_TWINS[operation])
    return twin is not None and (observable is None or issubclass(twin, observable))
