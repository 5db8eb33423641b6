"""The cyclic garbage collector held off for the length of one synchronous build.

CPython starts a young collection every 700 new container objects (net) and an older one every
ten of those, whatever the objects are. A large Initial makes two or more of them a row (a node
and its ``__dict__``, more for contents holding containers), so a build left alone runs many
young collections, several middle ones and full passes over the whole heap inside rxmesh's own
steps, although none of those objects can be garbage yet (they are in the list being built).
Held off for each step, the build gets one young collection a step, and the middle and full
passes that counting starts come less often (docs/performance.md, "Stop 27", has the figures).

:func:`collector_paused` pauses it only around synchronous code (nothing is awaited inside, so
no other task of the loop runs with the collector off) and puts back what it found: a collector
the application had disabled stays disabled. It is a pause, not a change of the application's
settings: the thresholds and the generations are untouched, and the objects made are collected
as usual afterwards (the allocation count is kept, so the next allocation after the pause starts
the young collection they are due).

Another thread that disables the collector while a pause of this one is in progress has it
re-enabled at the pause's end; rxmesh never runs such a pause off its event loop's thread.
"""

from __future__ import annotations

import gc
from types import TracebackType

__all__ = ["collector_paused"]

_disable, _enable, _isenabled = gc.disable, gc.enable, gc.isenabled


class collector_paused:  # used like a function: ``with collector_paused():``
    """``with collector_paused(): ...``: the cyclic collector is off inside and as it was after
    (also when the block raises)."""

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = _isenabled()
        if self._was_enabled:
            _disable()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._was_enabled:
            _enable()
