"""Bridges between asyncio and reactivex: rxmesh for programs that never touch reactivex.

- :func:`iterate` — ``async for frame in iterate(mesh.live(query))``: errors raise at the
  ``async for``, leaving the loop (or cancelling the task) disposes the subscription, and a slow
  consumer never grows memory without bound (query frames coalesce into the latest state; other
  items wait in a bounded buffer, then :class:`~rxmesh.exceptions.SlowConsumerError`).
- :func:`reopen_on_transient_fault_async` and :func:`retry_transient_connect_async` — the ladder's
  two rules (:mod:`rxmesh.operators`) for async iterators and async-generator functions: same
  defaults, classifiers and hooks, "only before the first item" and "an item resets the budget";
  nothing yielded is yielded twice.
- :func:`from_async` is lazy: every subscription starts a new coroutine (so a retry or a re-open
  really re-runs the work) and disposing the subscription cancels it. :func:`first_value` awaits
  the first item of an observable.

All of them run on the running asyncio loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

from reactivex import Observable, abc
from reactivex.disposable import SerialDisposable

from rxmesh._util.arguments import at_least
from rxmesh._util.one_shot import OneShot, Subscribed
from rxmesh.exceptions import SlowConsumerError
from rxmesh.model import FrameKind, MeshNode, QueryFrame
from rxmesh.operators._aio_reopen_on_transient_fault import reopen_on_transient_fault_async
from rxmesh.operators._aio_retry_transient_connect import retry_transient_connect_async

__all__ = [
    "first_value",
    "iterate",
    "reopen_on_transient_fault_async",
    "retry_transient_connect_async",
]

T = TypeVar("T")

DEFAULT_MAX_PENDING = 1024
"""Items an ``async for`` may fall behind its stream before :class:`SlowConsumerError`."""


def from_async(factory: Callable[[], Awaitable[T]]) -> Observable[T]:
    """A cold observable that runs ``factory()`` on the running loop for each subscription.

    The result is emitted then the observable completes; an exception is delivered as
    ``on_error`` unchanged. Disposing before completion cancels the task. Subscribing needs a
    running asyncio loop (or a loop set as current).

    Example:
        >>> async def answer() -> int:
        ...     return 42
        >>> obs = from_async(answer)
    """
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {factory!r}")

    def subscribe(
        observer: abc.ObserverBase[T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        async def run(task: Subscribed) -> None:
            try:
                value = await factory()
            except asyncio.CancelledError as cancelled:
                if not task.disposed:
                    # Delivered so the consumer's terminal arm can classify it.
                    observer.on_error(cast(Exception, cancelled))
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                return
            except Exception as exc:  # noqa: BLE001 - forwarded to the observer, never dropped
                if not task.disposed:
                    observer.on_error(exc)
                return
            if not task.disposed:
                observer.on_next(value)
                observer.on_completed()

        return Subscribed(run)

    return Observable(subscribe)


async def first_value(source: Observable[T], *, timeout: float | None = None) -> T:
    """Await the first item of ``source`` (then dispose it).

    Raises the source's error unchanged, ``LookupError`` if it completes empty, and
    ``TimeoutError`` if ``timeout`` seconds pass first. A node operation's answer is awaited
    directly, in this task (the same attempt a subscription runs, with no observable between).
    """
    if isinstance(source, OneShot):
        if timeout is None:
            return cast(T, await source.direct())
        async with asyncio.timeout(timeout):
            return cast(T, await source.direct())
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    sink = _FirstSink(future)
    subscription = source.subscribe(sink.on_next, sink.on_error, sink.on_completed)
    try:
        if timeout is None:
            return await future
        async with asyncio.timeout(timeout):
            return await future
    finally:
        subscription.dispose()
        # The error raised here holds, in its traceback, the frames that delivered it, and they
        # hold the observer: without this, each error delivered left a cycle (the future, the
        # error, its traceback, ~50 objects) that only the garbage collector could free.
        sink.future = None
        del future


class _FirstSink(Generic[T]):
    """The observer of :func:`first_value`: its future takes the first item, error or end
    (none once :func:`first_value` has returned)."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[T]) -> None:
        self.future: asyncio.Future[T] | None = future

    def on_next(self, value: T) -> None:
        future = self.future
        if future is not None and not future.done():
            future.set_result(value)

    def on_error(self, error: Exception) -> None:
        future = self.future
        if future is not None and not future.done():
            future.set_exception(error)

    def on_completed(self) -> None:
        future = self.future
        if future is not None and not future.done():
            future.set_exception(LookupError("the observable completed without a value"))


def iterate(
    source: Observable[T], *, max_pending: int = DEFAULT_MAX_PENDING
) -> ObservableIterator[T]:
    """Iterate ``source`` with ``async for``; see :class:`ObservableIterator` for the rules.

    Example:
        >>> import reactivex
        >>> async def main() -> list[int]:
        ...     return [item async for item in iterate(reactivex.of(1, 2))]
    """
    at_least("max_pending", max_pending, 1)
    if not isinstance(source, abc.ObservableBase):
        raise TypeError(f"source must be an observable, got {type(source).__name__}")
    return ObservableIterator(source, max_pending)


class ObservableIterator(AsyncIterator[T]):
    """An observable as an async iterator: subscribed at the first ``__anext__``, on its loop.

    - The source's error is raised at the ``async for`` (the same object), after the items that
      arrived before it; completion ends the loop.
    - Leaving the loop disposes the subscription: at once when the loop iterates ``iterate(...)``
      directly (the iterator is dropped), else at ``aclose()``/``close()`` or the end of an
      ``async with`` block. A cancelled (or failed) ``__anext__`` disposes it too, so cancelling
      the task that iterates ends the subscription.
    - A slow consumer: a :class:`~rxmesh.model.QueryFrame` that arrives while another frame waits
      is coalesced into it (an Initial replaces what waits; a Delta is folded into the waiting
      Initial, or merged with the waiting Delta: latest node per path, removals kept), so at most
      one frame of at most the query's size waits, the latest state. The merged frame carries
      the latest frame's ``resume_token``; merged deltas that hold a resumed one stay
      ``resumed``, and a ``reset`` Initial replaces what waits and stays ``reset``. Other items
      wait in a FIFO
      of ``max_pending``; one more disposes the subscription there and, once the waiting items
      are delivered, the ``async for`` raises :class:`~rxmesh.exceptions.SlowConsumerError`.
    - Items pushed from another thread are handed to the loop (``call_soon_threadsafe``).
    - One step at a time, as an async generator: an ``__anext__`` called while another is still
      waiting (a second task awaiting the same iterator) raises ``RuntimeError`` at once and
      leaves the waiting one and the subscription as they were. Each consumer iterates an
      ``iterate(...)`` of its own.
    """

    __slots__ = ("_channel", "_max_pending", "_source", "_stepping", "_subscription")

    def __init__(self, source: Observable[T], max_pending: int) -> None:
        self._source = source
        self._max_pending = max_pending
        self._channel: _Channel[T] | None = None
        self._subscription = SerialDisposable()
        self._stepping = False

    def __aiter__(self) -> ObservableIterator[T]:
        return self

    async def __anext__(self) -> T:
        # A second waiter would share the channel's one wake-up with the first, and one of the two
        # would wait forever while items sit undelivered: refused, as async generators refuse it.
        if self._stepping:
            raise RuntimeError(
                "ObservableIterator.__anext__ is already running: another task is awaiting this "
                "iterate(...); give each consumer an iterate() of its own"
            )
        channel = self._channel
        if channel is None:
            if self._subscription.is_disposed:
                raise StopAsyncIteration
            channel = self._channel = _Channel(self._max_pending, self._subscription)
            self._subscription.disposable = self._source.subscribe(
                channel.on_next, channel.on_error, channel.on_completed
            )
        self._stepping = True
        try:
            return await channel.take()
        except BaseException:  # the end, an error or a cancellation: re-raised after disposal
            self.close()
            raise
        finally:
            self._stepping = False

    @property
    def pending(self) -> int:
        """Items received and not yet taken (a waiting coalesced frame counts as one)."""
        return 0 if self._channel is None else len(self._channel.items)

    def close(self) -> None:
        """Dispose the subscription; the next ``__anext__`` ends the loop. Idempotent."""
        self._subscription.dispose()
        if self._channel is not None:
            self._channel.finish(None)

    async def aclose(self) -> None:
        """:meth:`close`, awaitable (as ``contextlib.aclosing`` expects)."""
        self.close()

    async def __aenter__(self) -> ObservableIterator[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        subscription = getattr(self, "_subscription", None)
        if subscription is not None:
            subscription.dispose()


class _Channel(Generic[T]):
    """What the subscription feeds; it holds no reference to the iterator, so dropping the
    iterator disposes the subscription even while the source still holds this channel."""

    __slots__ = (
        "error",
        "finished",
        "items",
        "loop",
        "max_pending",
        "subscription",
        "thread",
        "waiter",
    )

    def __init__(self, max_pending: int, subscription: SerialDisposable) -> None:
        self.loop = asyncio.get_running_loop()
        self.thread = threading.get_ident()
        self.items: deque[Any] = deque()
        self.max_pending = max_pending
        self.subscription = subscription
        self.error: Exception | None = None
        self.finished = False
        self.waiter: asyncio.Future[None] | None = None

    def on_next(self, item: T) -> None:
        self._on_loop(self._push, item)

    def on_error(self, error: Exception) -> None:
        self._on_loop(self.finish, error)

    def on_completed(self) -> None:
        self._on_loop(self.finish, None)

    def _on_loop(self, handler: Callable[[Any], None], value: Any) -> None:
        if threading.get_ident() == self.thread:
            handler(value)
        else:
            self.loop.call_soon_threadsafe(handler, value)

    def _push(self, item: T) -> None:
        if self.finished:
            return
        items = self.items
        if isinstance(item, QueryFrame) and items and isinstance(items[-1], QueryFrame | _Frames):
            last = items[-1]
            if isinstance(last, QueryFrame):
                last = items[-1] = _Frames(last)
            last.add(item)
        elif len(items) >= self.max_pending:
            self.subscription.dispose()
            self.finish(
                SlowConsumerError(
                    f"the consumer fell {self.max_pending} items behind its stream; "
                    "the subscription was disposed"
                )
            )
            return
        else:
            items.append(item)
        self._wake()

    def finish(self, error: Exception | None) -> None:
        if self.finished:
            return
        self.finished = True
        self.error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self) -> T:
        while not self.items:
            if self.finished:
                error, self.error = self.error, None
                if error is not None:
                    raise error
                raise StopAsyncIteration
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        item = self.items.popleft()
        return cast(T, item.frame() if isinstance(item, _Frames) else item)


class _Frames:
    """Frames that arrived while the consumer was busy, folded into one: O(change) per frame."""

    __slots__ = (
        "incomplete",
        "kind",
        "nodes",
        "provider",
        "removed",
        "reset",
        "resumed",
        "silent",
        "token",
    )

    def __init__(self, frame: QueryFrame) -> None:
        self.kind = frame.kind
        self.nodes: dict[str, MeshNode] = {}
        self.removed: dict[str, None] = {}
        self.silent: dict[str, None] = {}
        self.incomplete = False
        self.provider: str | None = None
        self.token: str | None = None
        self.resumed = False
        self.reset = False
        self._replace(frame)

    def _replace(self, frame: QueryFrame) -> None:
        self.kind = frame.kind
        self.nodes = {node.path: node for node in frame.nodes}
        self.removed = dict.fromkeys(frame.removed)
        self.silent = dict.fromkeys(frame.silent_providers)
        self.incomplete = frame.snapshot_incomplete
        self.provider = frame.provider
        self.token = frame.resume_token
        self.resumed = frame.resumed
        self.reset = frame.reset

    def add(self, frame: QueryFrame) -> None:
        if frame.kind is FrameKind.INITIAL:
            self._replace(frame)  # a snapshot supersedes what waits
            return
        delta = self.kind is FrameKind.DELTA
        # Where the merged frame stands is where its latest frame does; a merged Delta that
        # holds a resume answers that resume too (it applies to the view its token came from).
        self.token = frame.resume_token
        self.resumed = self.resumed or (delta and frame.resumed)
        for path in frame.removed:
            self.nodes.pop(path, None)
            if delta:
                self.removed[path] = None
        for node in frame.nodes:
            self.nodes[node.path] = node
            self.removed.pop(node.path, None)
        if delta:
            self.silent.update(dict.fromkeys(frame.silent_providers))
            if frame.provider != self.provider:
                self.provider = None

    def frame(self) -> QueryFrame:
        if self.kind is FrameKind.INITIAL:
            nodes = tuple(self.nodes[path] for path in sorted(self.nodes))
        else:
            nodes = tuple(self.nodes.values())
        return QueryFrame(
            kind=self.kind,
            nodes=nodes,
            removed=tuple(self.removed),
            silent_providers=tuple(self.silent),
            snapshot_incomplete=self.incomplete,
            provider=self.provider,
            resume_token=self.token,
            resumed=self.resumed,
            reset=self.reset,
        )
