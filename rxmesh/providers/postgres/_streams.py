"""The change feed's hot streams, each publishing to every subscriber on its own."""

from __future__ import annotations

from typing import Any

from reactivex.subject import Subject

from rxmesh.providers.postgres._book import FeedBook

__all__ = ["Hot"]


class Hot:
    """A hot stream with an honest count of its subscribers; ``on_next`` reaches each one on
    its own: a subscriber that raises is reported (ERROR, rate-limited, by the feed's book) and
    the others, live queries included, still get the value."""

    __slots__ = ("_book", "_stream", "subject")

    def __init__(self, book: FeedBook, stream: str) -> None:
        self.subject: Subject[Any] = Subject()
        self._book = book
        self._stream = stream

    @property
    def observed(self) -> bool:
        return bool(self.subject.observers)

    def publish(self, value: object) -> None:
        subject = self.subject
        if subject.is_disposed or subject.is_stopped:
            return
        with subject.lock:
            observers = subject.observers.copy()
        for observer in observers:
            try:
                observer.on_next(value)
            except Exception as exc:  # noqa: BLE001 - reported; the other subscribers go on
                self._book.subscriber_error(self._stream, exc)
