"""The subscriber's own ``on_next``, for an operator that must see every item.

Both ladder operators watch each item go by (the retry ladder retries only before the first; the
re-open schedule is reset by any emission), so each item costs them one Python call of their own.
``Observable.subscribe`` wraps every subscriber in an ``AutoDetachObserver`` whose ``on_next`` is
one more call: ``if self.is_stopped: return`` and then the subscriber's function. An operator that
makes that same check itself can call the subscriber's function directly, and its own call
replaces that one instead of adding to it: the operator then costs what a do-nothing
pass-through costs (docs/performance.md, "The operators' happy path").

That reaches into reactivex: the ``_on_next`` the ``AutoDetachObserver`` keeps. So it is done only
for that exact class holding a callable ``_on_next`` and a ``bool`` ``is_stopped``; any other
observer is called through its ``on_next``, as before. tests/operators/test_sink.py fails if the
installed reactivex's ``AutoDetachObserver`` stops looking as described.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from reactivex import abc
from reactivex.observer import AutoDetachObserver

__all__ = ["Stoppable", "direct_sink"]

_T = TypeVar("_T")


class Stoppable(Protocol):
    """What an item's delivery checks first: whether the subscriber stopped."""

    is_stopped: bool


class _NeverStopped:
    """An observer that is not reactivex's own checks for itself, in its ``on_next``."""

    __slots__ = ()
    is_stopped = False


_NEVER_STOPPED = _NeverStopped()


def direct_sink(observer: abc.ObserverBase[_T]) -> tuple[Stoppable, Callable[[_T], None]]:
    """``(owner, sink)``: deliver an item as ``if not owner.is_stopped: sink(item)``, which is what
    ``observer.on_next(item)`` does, with one call fewer when ``observer`` is reactivex's
    ``AutoDetachObserver``."""
    if type(observer) is AutoDetachObserver:
        sink: Any = getattr(observer, "_on_next", None)
        if callable(sink) and type(getattr(observer, "is_stopped", None)) is bool:
            return observer, sink
    return _NEVER_STOPPED, observer.on_next
