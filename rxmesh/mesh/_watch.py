"""``Mesh.watch``: the live query a service streams, re-opened after a transient fault."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from reactivex import Observable, abc
from reactivex import operators as ops

from rxmesh.mesh._core import MeshCore
from rxmesh.model import NodeQuery, QueryFrame
from rxmesh.operators import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS,
    DEFAULT_REOPEN_BACKOFF,
    reopen_on_transient_fault,
)


class _Live(Protocol):
    _core: MeshCore

    def live(self, query: NodeQuery, resume_from: str | None = None) -> Observable[QueryFrame]: ...


class Watching:
    """What :class:`~rxmesh.mesh.Mesh` adds to its :meth:`live` queries for a service."""

    def watch(
        self: _Live,
        query: NodeQuery,
        resume_from: str | None = None,
        *,
        backoff: Sequence[float] = DEFAULT_REOPEN_BACKOFF,
        max_consecutive: int = DEFAULT_MAX_CONSECUTIVE_REOPENS,
    ) -> Observable[QueryFrame]:
        """The shared ``live`` query, re-opened through the cache after a transient fault
        (:func:`~rxmesh.operators.reopen_on_transient_fault`, as the census is): each re-open
        resumes from the last ``resume_token`` seen (``live(query, resume_from=token)``), so it
        starts with a Delta of what changed meanwhile (``resumed``) rather than the whole state,
        or an Initial marked ``reset`` when the store can no longer tell; with no token seen yet
        it starts with a fresh Initial. The first opening resumes from ``resume_from`` when
        given. It ends with a fault that is not transient, or after ``max_consecutive``
        re-opens in a row without a frame (``backoff`` seconds before each).
        ``async for frame in iterate(mesh.watch(query))`` reads it; :class:`rxmesh.web.EventStream`
        serves it as Server-Sent Events.

        Raises:
            MeshDisposedError: the mesh was disposed.
        """
        self.live(query)  # refuses a disposed mesh now; nothing opens before a subscription
        live, scheduler = self.live, self._core.scheduler
        # Built once now so bad arguments are refused here; each subscription builds its own,
        # over its own position.
        reopen_on_transient_fault(
            lambda: live(query), backoff=backoff, max_consecutive=max_consecutive
        )

        def subscribe(
            observer: abc.ObserverBase[QueryFrame],
            subscribe_scheduler: abc.SchedulerBase | None = None,
        ) -> abc.DisposableBase:
            last = [resume_from]  # this subscription's position: where each re-open resumes

            def seen(frame: QueryFrame) -> QueryFrame:
                last[0] = frame.resume_token
                return frame

            def open_() -> Observable[QueryFrame]:
                return live(query, last[0]).pipe(ops.map(seen))

            watched = reopen_on_transient_fault(
                open_, backoff=backoff, max_consecutive=max_consecutive, scheduler=scheduler
            )
            return watched.subscribe(observer, scheduler=subscribe_scheduler)

        return Observable(subscribe)
