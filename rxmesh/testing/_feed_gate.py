"""The change-feed gate of :class:`~rxmesh.testing.FaultInjectingStore`: every feed item passes
it, and it delivers, holds (until released) or drops them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Literal, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import CompositeDisposable, Disposable

__all__ = ["FeedGate", "FeedMode", "through_gate"]

_T = TypeVar("_T")

FeedMode = Literal["open", "hold", "drop"]
"""The change feed: delivered, buffered until resumed, or lost."""


class _Sink:
    """One subscriber's place at the feed gate: buffers while held."""

    def __init__(self) -> None:
        self.held: list[Callable[[], None]] = []


class FeedGate:
    """Delivers, holds or drops feed items; one sink per subscriber."""

    def __init__(self, injected: Counter[str]) -> None:
        self.mode: FeedMode = "open"
        self.sinks: list[_Sink] = []
        self._injected = injected

    def deliver(self, sink: _Sink, emit: Callable[[], None]) -> None:
        if self.mode == "open":
            emit()
        elif self.mode == "hold":
            self._injected["held_event"] += 1
            sink.held.append(emit)
        else:
            self._injected["dropped_event"] += 1

    def release(self) -> None:
        self.mode = "open"
        for sink in list(self.sinks):
            pending, sink.held = sink.held, []
            for emit in pending:
                self._injected["released_event"] += 1
                emit()

    def join(self) -> tuple[_Sink, Disposable]:
        sink = _Sink()
        self.sinks.append(sink)
        return sink, Disposable(lambda: self.sinks.remove(sink))


def through_gate(
    gate: FeedGate, upstream: Observable[_T], passes: Callable[[_T], bool]
) -> Observable[_T]:
    """``upstream`` through the feed gate (items for which ``passes`` is True skip it)."""

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        sink, leave = gate.join()

        def on_next(item: _T) -> None:
            if passes(item):
                observer.on_next(item)
            else:
                gate.deliver(sink, lambda: observer.on_next(item))

        inner = upstream.subscribe(
            on_next, observer.on_error, observer.on_completed, scheduler=scheduler
        )
        return CompositeDisposable(inner, leave)

    return Observable(subscribe)
