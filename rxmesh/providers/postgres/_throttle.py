"""The rate limit of the change feed's log lines (the malformed-notification and
subscriber-error reports of :class:`~rxmesh.providers.postgres._book.FeedBook`)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Throttle"]


class Throttle:
    """Lets one log line through per ``interval`` seconds; counts the lines it holds back."""

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._held = 0

    def _due(self) -> bool:
        return self._last is None or self._clock() - self._last >= self._interval

    def admit(self) -> int | None:
        """``None`` if this line must be held back (it is counted); else how many were held
        back before it (a line may be written now, and should say so)."""
        if not self._due():
            self._held += 1
            return None
        self._last = self._clock()
        held, self._held = self._held, 0
        return held

    def take_held(self, *, force: bool = False) -> int:
        """How many lines were held back, if a summary of them is due now (else 0)."""
        if not self._held or not (force or self._due()):
            return 0
        self._last = self._clock()
        held, self._held = self._held, 0
        return held
