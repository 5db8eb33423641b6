"""Pipeable reactivex operators of rxmesh: the retry ladder and the standing-watch re-open.

- :func:`retry_transient_connect` — ``source.pipe(retry_transient_connect())``:
  resubscribes a cold source after a transient connect fault, only before its first item, waiting
  :data:`DEFAULT_RETRY_DELAYS` (0.25 s, 0.5 s, 1.0 s); then the last error surfaces unchanged.
  An empty ``delays`` is legal and means "never retry".
- :func:`reopen_on_transient_fault` — ``reopen_on_transient_fault(factory)``: a standing
  watch that calls its factory again after a transient fault, waiting
  :data:`DEFAULT_REOPEN_BACKOFF` (2, 5, 15, 30, 60 s) for at most
  :data:`DEFAULT_MAX_CONSECUTIVE_REOPENS` (5) re-opens in a row without an emission.
- :class:`Ladder` — the ladder itself: ``await Ladder.of().call(coroutine_function)`` runs a
  one-shot coroutine through it (the mesh's own store calls go this way); :class:`ReopenLadder`
  is the re-open schedule.

Each takes ``jitter=`` (off by default: the schedules above are the contract; with it, up to that
fraction of each delay is added at random, from ``random=``), and all the waits shrink at once
under :func:`rxmesh.testing.set_testing`. The same two rules for async iterators, as decorators
on an async-generator function, are in :mod:`rxmesh.aio`.

All take ``scheduler=``; without one the operators use the subscription's scheduler, else the
running asyncio loop, never a thread timer inside an asyncio application (the async drivers:
``asyncio.sleep``). Bad arguments are refused when the operator is built (``TypeError``/
``ValueError`` naming the argument), not at subscribe time.

The layout: ``_ladder`` the one definition of the retry ladder and the re-open schedule (each
run's rule, ``decide(fault, emitted)``, from its ``decider()``); ``_retry_transient_connect``,
``_reopen_on_transient_fault`` and ``_fan_in`` the Rx operators, the first two on the one
subscription loop of ``_resubscribe`` (``_sink`` the subscriber's own ``on_next``); the asyncio
drivers :mod:`rxmesh.aio` exports, ``_aio_retry_transient_connect`` and
``_aio_reopen_on_transient_fault``, on the one loop of ``_aio_drive``.
"""

from __future__ import annotations

# The async drivers' home is rxmesh.aio; these imports keep ``from rxmesh.operators import ...``
# working, outside __all__.
from rxmesh.operators._aio_reopen_on_transient_fault import (
    reopen_on_transient_fault_async as reopen_on_transient_fault_async,
)
from rxmesh.operators._aio_retry_transient_connect import (
    retry_transient_connect_async as retry_transient_connect_async,
)
from rxmesh.operators._fan_in import DEFAULT_INITIAL_BUDGET as DEFAULT_INITIAL_BUDGET
from rxmesh.operators._fan_in import fan_in
from rxmesh.operators._ladder import Ladder, ReopenLadder
from rxmesh.operators._reopen_on_transient_fault import (
    DEFAULT_MAX_CONSECUTIVE_REOPENS as DEFAULT_MAX_CONSECUTIVE_REOPENS,
)
from rxmesh.operators._reopen_on_transient_fault import (
    DEFAULT_REOPEN_BACKOFF as DEFAULT_REOPEN_BACKOFF,
)
from rxmesh.operators._reopen_on_transient_fault import (
    reopen_on_transient_fault,
)
from rxmesh.operators._retry_transient_connect import DEFAULT_RETRY_DELAYS as DEFAULT_RETRY_DELAYS
from rxmesh.operators._retry_transient_connect import retry_transient_connect

__all__ = [
    "Ladder",
    "ReopenLadder",
    "fan_in",
    "reopen_on_transient_fault",
    "retry_transient_connect",
]
