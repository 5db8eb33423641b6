"""Bridges between asyncio coroutines and reactivex observables.

:func:`from_async` is lazy: every subscription starts a NEW coroutine (so a retry or a re-open
really re-runs the work) and disposing the subscription cancels it. :func:`first_value` awaits the
first item of an observable. Both run on the running asyncio loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from reactivex import Observable, abc
from reactivex.disposable import Disposable

__all__ = ["first_value", "from_async"]

T = TypeVar("T")


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
        loop = asyncio.get_event_loop()
        disposed = False

        async def run() -> None:
            try:
                value = await factory()
            except asyncio.CancelledError as cancelled:
                if not disposed:
                    # Delivered so the consumer's terminal arm can classify it.
                    observer.on_error(cast(Exception, cancelled))
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                return
            except Exception as exc:  # noqa: BLE001 - forwarded to the observer, never dropped
                if not disposed:
                    observer.on_error(exc)
                return
            if not disposed:
                observer.on_next(value)
                observer.on_completed()

        task = loop.create_task(run())

        def dispose() -> None:
            nonlocal disposed
            disposed = True
            if not task.done():
                task.cancel()

        return Disposable(dispose)

    return Observable(subscribe)


async def first_value(source: Observable[T], *, timeout: float | None = None) -> T:
    """Await the first item of ``source`` (then dispose it).

    Raises the source's error unchanged, ``LookupError`` if it completes empty, and
    ``TimeoutError`` if ``timeout`` seconds pass first.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def on_next(value: T) -> None:
        if not future.done():
            future.set_result(value)

    def on_error(error: Exception) -> None:
        if not future.done():
            future.set_exception(error)

    def on_completed() -> None:
        if not future.done():
            future.set_exception(LookupError("the observable completed without a value"))

    subscription = source.subscribe(on_next, on_error, on_completed)
    try:
        if timeout is None:
            return await future
        return await asyncio.wait_for(future, timeout)
    finally:
        subscription.dispose()
