"""Connection attempts shared while the store cannot be reached.

While a store answers, every operation takes a pooled connection as it comes. Once taking one
has failed because the store could not be reached (the one rule, rxmesh.faults), every waiting
operation would make its own attempt: a burst of creates in an outage, each with its retry
ladder, makes thousands of connection attempts, each costing the driver this process's CPU before
the socket is even opened (it parses the DSN and builds a TLS context every time), and the
database that comes back meets them all at once (docs/performance.md, bench/loop_steps.py's
``unavailable`` scenario).

:class:`SharedAttempts` makes one attempt at a time while the store is known unreachable; an
operation arriving while it is in flight waits for it and, if it failed the same way, is
answered from it (with its own error, naming its own operation). Anything else -- the attempt
succeeded, was cancelled, or failed for another reason -- answers nobody else: each waiting
operation then tries for itself, as before. The store is known reachable again as soon as an
attempt succeeds or fails for a reason other than reachability.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

__all__ = ["SharedAttempts"]

T = TypeVar("T")


class SharedAttempts:
    """One attempt at a time while the last one found the store unreachable (see the module)."""

    __slots__ = ("_down", "_waiting", "shared")

    def __init__(self) -> None:
        self._down = False
        self._waiting: list[asyncio.Future[BaseException | None]] | None = None
        """While an attempt is in flight, the futures of the operations waiting for it."""
        self.shared = 0
        """Operations answered by another's failed attempt instead of making their own."""

    @property
    def down(self) -> bool:
        """Whether the last attempt that decided it found the store unreachable."""
        return self._down

    def reached(self) -> None:
        """A connection taken outside these attempts (the change feed's probe) reached the
        store: it is known reachable again."""
        self._down = False

    async def attempt(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        unreachable: Callable[[BaseException], bool],
        answer: Callable[[BaseException], NoReturn],
    ) -> T:
        """``attempt()``'s result, or its error; while the store is down, possibly another's.

        ``unreachable(error)``: whether an attempt's error says the store could not be reached.
        ``answer(failure)``: raises this caller's error for a failure of another caller's
        attempt (never ``failure`` itself: one exception object raised in many tasks would
        collect all their tracebacks).
        """
        while True:
            if not self._down:
                try:
                    return await attempt()
                except BaseException as error:
                    if unreachable(error):
                        self._down = True
                    raise
            waiting = self._waiting
            if waiting is None:
                return await self._lead(attempt, unreachable)
            # A future of its own, not a shield over the attempt's: cancelling this caller
            # cancels only its wait, and a waiting operation holds one object, not a shield's
            # future, two callbacks and their contexts (thousands of operations wait in an outage).
            waiter: asyncio.Future[BaseException | None] = (
                asyncio.get_running_loop().create_future()
            )
            waiting.append(waiter)
            failure = await waiter
            if failure is not None:
                self.shared += 1
                try:
                    answer(failure)
                finally:
                    failure = None  # this frame is in the raised error's traceback: no cycle
            # No verdict for others: try again (the store may be up, or this caller leads).

    async def _lead(
        self, attempt: Callable[[], Awaitable[T]], unreachable: Callable[[BaseException], bool]
    ) -> T:
        waiting: list[asyncio.Future[BaseException | None]] = []
        self._waiting = waiting
        failure: BaseException | None = None
        try:
            result = await attempt()
        except asyncio.CancelledError:
            raise  # says nothing about the store: the next waiter leads
        except BaseException as error:
            if unreachable(error):
                failure = error
            else:
                self._down = False  # the store answered (or this is no fault of reaching it)
            raise
        else:
            self._down = False
            return result
        finally:
            self._waiting = None
            for waiter in waiting:
                if not waiter.done():  # a cancelled caller's wait is over already
                    waiter.set_result(failure)
            # The failure holds this frame in its traceback, and the futures hold the failure:
            # this frame holds neither once they are handed on (no reference cycle).
            failure = waiter = waiting = None  # type: ignore[assignment]
