"""The one-shot observable behind rxmesh's node operations, and the task a subscription runs.

A node operation answers exactly once. :class:`OneShot` is an observable of that one item whose
work can also be awaited directly: subscribing runs it on a task of its own (a
:class:`Subscribed`), while :func:`rxmesh.aio.first_value` awaits ``direct()`` in the caller's
task, the same attempt without the observable machinery. The mesh builds its answers on it and
:mod:`rxmesh.aio` recognises it, so it lives here rather than in either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from reactivex import Observable, abc

__all__ = ["OneShot", "Subscribed"]

T = TypeVar("T")


class Subscribed(abc.DisposableBase):
    """One subscription's work, run as a task on the running loop (or the current one).

    Disposing it sets :attr:`disposed` (the work answers nobody from then on) and cancels the
    task if it is still running. The work receives this object, to read :attr:`disposed`.
    """

    __slots__ = ("_task", "disposed")

    def __init__(self, work: Callable[[Subscribed], Coroutine[Any, Any, None]]) -> None:
        self.disposed = False
        self._task = asyncio.get_event_loop().create_task(work(self))

    def dispose(self) -> None:
        self.disposed = True
        if not self._task.done():
            self._task.cancel()


class OneShot(Observable[T]):
    """An observable of exactly one item whose work an ``await`` can also run directly.

    Subscribing runs the work on a task of its own (the observable edge);
    :func:`~rxmesh.aio.first_value` awaits ``direct()`` in the caller's task instead: the same
    attempt, without the observable machinery (the mesh's node operations are built so).
    """

    def __init__(
        self,
        subscribe: Callable[[abc.ObserverBase[T], abc.SchedulerBase | None], abc.DisposableBase]
        | None = None,
        direct: Callable[[], Awaitable[T]] | None = None,
    ) -> None:
        super().__init__(subscribe)
        self._direct = direct

    def direct(self) -> Awaitable[T]:
        """The work, run in the awaiting task (a subclass may define it instead)."""
        if self._direct is None:
            raise NotImplementedError("a one-shot observable needs its direct work")
        return self._direct()
