"""``set_testing``: every retry and re-open wait of rxmesh shrunk in one call, for the tests of
code built on rxmesh (as stamina's ``set_testing`` does for its retries)."""

from __future__ import annotations

from types import TracebackType

from rxmesh.operators._ladder import delay_scale, scale_delays

__all__ = ["is_testing", "set_testing"]


class _Restore:
    """Undoes one :func:`set_testing` when used as a context manager."""

    __slots__ = ("_previous",)

    def __init__(self, previous: float | None) -> None:
        self._previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        scale_delays(self._previous)


def set_testing(testing: bool = True, *, scale: float = 0.0) -> _Restore:
    """Multiply every wait of the retry ladder and of the standing-watch re-open schedule by
    ``scale`` (0, the default: no wait at all) while ``testing``; ``set_testing(False)`` restores
    the schedules as defined.

    The budget is unchanged (the same number of retries and re-opens, the same classification and
    hooks); only the waits shrink, for ladders built before the call too. Used as a context
    manager, it restores the previous setting on exit::

        with set_testing():
            ...  # every retry and re-open happens at once

    Raises:
        ValueError: ``scale`` is negative or not finite.
    """
    return _Restore(scale_delays(scale if testing else None))


def is_testing() -> bool:
    """Whether :func:`set_testing` is on."""
    return delay_scale() is not None
