"""The ``Store`` protocol every provider implements.

The one-shot verbs (``read``, ``read_many``, ``page``, ``write``, ``update``, ``delete``, ``move``)
are coroutine methods: each call is one attempt, and awaiting it again means calling it again
(the mesh's retry ladder does). What streams stays an observable: ``write_many`` (a window at a
time, cold: every subscription runs the work again, so ``retry_transient_connect`` really
retries) and ``query`` (cold too), and the hot ``changes``, ``gaps`` and ``answers_again``,
which report what the store sees. :func:`observe` turns a verb into a cold observable, for a
pipeline that wants one.

Fault contract: a read returns ``None`` only for a clean absence (including "the partition's
schema does not exist yet"); every fault propagates as an error, never as ``None``. Driver and
network failures are mapped at the provider's boundary to :class:`~rxmesh.exceptions.StoreError`
with the right ``sqlstate`` and ``raise ... from exc``, so :mod:`rxmesh.faults` classifies them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import ParamSpec, Protocol, TypeVar, runtime_checkable

from reactivex import Observable

from rxmesh.aio import from_async
from rxmesh.model import (
    ChangeFeedGap,
    MeshNode,
    NodeChange,
    NodeQuery,
    QueryFrame,
    StoreEvidence,
    WindowCommitted,
)

__all__ = ["DEFAULT_WRITE_WINDOW", "Store", "feed_is_whole", "observe"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

DEFAULT_WRITE_WINDOW = 1000
"""Rows per bulk-write window (one transaction each)."""


@runtime_checkable
class Store(Protocol):
    """A place nodes live. See the module docstring for the contract."""

    @property
    def name(self) -> str:
        """A printable name for logs and answers, e.g. ``"postgres@127.0.0.1:5432/test"``."""
        ...

    async def read(self, path: str) -> MeshNode | None:
        """The node at ``path``, or ``None`` for a clean absence; faults propagate."""
        ...

    async def read_many(self, paths: Sequence[str]) -> dict[str, MeshNode]:
        """The nodes present among ``paths`` (absent paths are missing from the dict)."""
        ...

    async def write(self, node: MeshNode) -> MeshNode:
        """Insert ``node`` if its path is free and return the stored row.

        If a row already exists with the SAME ``request_id`` (an ambiguous commit that did land),
        the existing row is returned as if written now. A row with another request id errors with
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

    async def update(
        self,
        node: MeshNode,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """Replace the content/type of an existing node (version + 1); ``None`` if absent.

        Compare-and-set: with ``expected_version`` (and ``expected_request_id``, the id of the
        write that produced it) a row not at that version, by that write, errors with
        :class:`~rxmesh.exceptions.StoreVersionConflictError` and changes nothing.
        ``request_id`` becomes the row's (the id of its last write); a row already carrying it
        is this request's landed update, returned unchanged.
        """
        ...

    async def delete(
        self,
        path: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
    ) -> bool:
        """Delete the node at ``path`` (not its children); ``False`` if it was absent.
        Compare-and-set as :meth:`update`."""
        ...

    async def move(
        self,
        source: str,
        target: str,
        expected_version: int | None = None,
        expected_request_id: str | None = None,
        request_id: str | None = None,
    ) -> MeshNode | None:
        """Move a node to a free path in one transaction; ``None`` if ``source`` is absent.

        A taken target errors with :class:`~rxmesh.exceptions.StoreConflictError`. The source
        is compared-and-set as :meth:`update`; ``request_id`` becomes the moved row's, and a
        target carrying it (the source gone) is this request's landed move, returned.
        """
        ...

    async def page(self, query: NodeQuery, after: MeshNode | None, limit: int) -> list[MeshNode]:
        """The first ``limit`` nodes matching ``query`` (its content filter included) strictly
        after ``after`` in the query's window order (:meth:`NodeQuery.sort_key`: ``order_by``,
        then the path), in that order; ``after=None`` starts at the first. One bounded read:
        what an ordered window's Initial and each refill cost."""
        ...

    def query(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]:
        """One Initial frame (every match), then a Delta per committed change that matches;
        every frame carries its ``resume_token``. With ``resume_from`` (a token this store
        gave), the first frame is a Delta of what changed since (``resumed``), or an Initial
        marked ``reset`` when the store cannot tell any more.
        With ``order_by`` or ``limit``, the live window of the first ``limit`` matches in that
        order (docs/live-queries.md, "Ordered windows")."""
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


def observe(
    verb: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs
) -> Observable[_T]:
    """A store's verb as a cold observable, for a pipeline that wants one: each subscription
    calls ``verb(*args, **kwargs)`` anew (so ``retry_transient_connect`` really re-runs the
    work), emits its result and completes; disposing before the result cancels the attempt.
    Errors are delivered unchanged. Subscribing needs a running asyncio loop.

    Example:
        >>> from rxmesh.operators import retry_transient_connect
        >>> from rxmesh.providers import InMemoryStore
        >>> store = InMemoryStore()
        >>> node = observe(store.read, "p/a").pipe(retry_transient_connect())
    """
    return from_async(functools.partial(verb, *args, **kwargs))


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
