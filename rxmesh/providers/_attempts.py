"""Connection attempts shared while the store cannot be reached.

While a store answers, every operation takes a pooled connection as it comes. Once taking one
has failed because the store could not be reached (the one rule, rxmesh.faults), every waiting
operation would make its own attempt: 1,000 creates in an outage, each with its retry ladder,
were 4,000 connection attempts in two seconds, each costing the driver about 0.5 ms of this
process's CPU before the socket is even opened (it parses the DSN and builds a TLS context every
time), and the database that comes back meets them all at once. Measured with
bench/loop_steps.py's ``unavailable`` scenario: 4,012 attempts and 4.4 s of CPU against 230 and
0.8 s with the attempts shared.

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

    __slots__ = ("_down", "_running", "shared")

    def __init__(self) -> None:
        self._down = False
        self._running: asyncio.Future[BaseException | None] | None = None
        self.shared = 0
        """Operations answered by another's failed attempt instead of making their own."""

    @property
    def down(self) -> bool:
        """Whether the last attempt that decided it found the store unreachable."""
        return self._down

    async def attempt(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        unreachable: Callable[[BaseException], bool],
        answer: Callable[[BaseException], NoReturn],
    ) -> T:
        """``attempt()``'s result, or its error; while the store is down, possibly another's.

        ``unreachable(error)``: whether an attempt's error says the store could not be reached.
        ``answer(failure)``: raises THIS caller's error for a failure of another caller's
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
            running = self._running
            if running is None:
                return await self._lead(attempt, unreachable)
            failure = await asyncio.shield(running)
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
        running: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self._running = running
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
            self._running = None
            running.set_result(failure)
            # The failure holds this frame in its traceback, and the future holds the failure:
            # this frame holds neither once they are handed on (no reference cycle).
            failure = running = None  # type: ignore[assignment]
