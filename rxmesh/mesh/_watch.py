"""``Mesh.watch``: the live query a service streams, re-opened after a transient fault."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from reactivex import Observable

from rxmesh.mesh._core import MeshCore
from rxmesh.model import NodeQuery, QueryFrame
from rxmesh.operators import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    reopen_on_transient_fault,
)


class _Live(Protocol):
    _core: MeshCore

    def live(self, query: NodeQuery) -> Observable[QueryFrame]: ...


class Watching:
    """What :class:`~rxmesh.mesh.Mesh` adds to its :meth:`live` queries for a service."""

    def watch(
        self: _Live,
        query: NodeQuery,
        *,
        backoff: Sequence[float] = DEFAULT_REOPEN_BACKOFF,
        max_consecutive: int = DEFAULT_MAX_CONSECUTIVE_REOPENS,
    ) -> Observable[QueryFrame]:
        """The shared ``live`` query, re-opened through the cache after a transient fault
        (:func:`~rxmesh.operators.reopen_on_transient_fault`, as the census is): each re-open
        starts with a fresh Initial, the whole state. It ends with a fault that is not
        transient, or after ``max_consecutive`` re-opens in a row without a frame (``backoff``
        seconds before each). ``async for frame in iterate(mesh.watch(query))`` reads it;
        :class:`rxmesh.web.EventStream` serves it as Server-Sent Events.

        Raises:
            MeshDisposedError: the mesh was disposed.
        """
        self.live(query)  # refuses a disposed mesh now; nothing opens before a subscription
        return reopen_on_transient_fault(
            lambda: self.live(query),
            backoff=backoff,
            max_consecutive=max_consecutive,
            scheduler=self._core.scheduler,
        )
