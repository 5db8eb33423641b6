"""Concurrent single-row creates of one table, sent together as one statement.

PostgreSQL serialises every transaction that NOTIFYs from its pre-commit step until its commit
is flushed (``PreCommit_Notify`` takes one cluster-wide lock so that notifications are queued
in commit order). rxmesh's tables announce every commit through a statement trigger, so 32
single-row creates in flight commit one after another, each waiting for its own WAL flush.

:class:`WriteGroups` lets a create go alone, exactly as before, while one of its table's
*lanes* is free; a create that arrives while every lane is busy waits, and when a lane frees,
everything waiting for that table goes as one group: one statement, one commit, one
notification step. Nothing waits for a timer: a group forms only from writes that were
already waiting behind a busy lane, so a lone create is never delayed.

Each member learns whether its row landed. A row that did not land (its path was taken) is
decided by the member itself, alone, as a lone create would be (an ambiguous commit of its own
request, or a conflict); two members of one path never share a group. A group the server
refused whole (a statement is atomic: nothing of it was written) is sent again member by
member, so one member's refused row is that member's answer alone. A group that could not be
evaluated gives every member the same error, which is each member's own outcome: the statement
either ran for all of them or for none. A member cancelled while it waits leaves its group before
it is sent; one cancelled after its group was sent may still have landed, as a lone create
cancelled during its INSERT may have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["WriteGroups"]

K = TypeVar("K")
I = TypeVar("I")  # noqa: E741 - an item of a group


class _Table(Generic[I]):
    __slots__ = ("busy", "waiting")

    def __init__(self) -> None:
        self.busy = 0
        self.waiting: list[tuple[I, asyncio.Future[bool | None]]] = []


class WriteGroups(Generic[K, I]):
    """Lanes per key, and the groups that form behind them.

    ``send(key, items)`` writes ``items`` in one statement and returns the paths that landed, or
    ``None`` when the statement was refused whole (each member then writes alone);
    ``path_of(item)`` is an item's path. ``lanes``: sends of one key in flight at once (lone
    creates and groups alike); ``most``: the largest group; ``size_of(item)``: its bytes on the
    wire, of which a group holds at most ``most_bytes`` (a larger item goes in a group of its
    own), so no group's statement is long to encode on the loop.
    """

    def __init__(
        self,
        send: Callable[[K, list[I]], Awaitable[set[str] | None]],
        path_of: Callable[[I], str],
        *,
        lanes: int = 2,
        most: int = 64,
        size_of: Callable[[I], int] = lambda _: 0,
        most_bytes: int = 1 << 20,
    ) -> None:
        if lanes < 1 or most < 2:
            raise ValueError(f"WriteGroups needs lanes >= 1 and most >= 2, got {lanes}, {most}")
        self._send = send
        self._path_of = path_of
        self._lanes = lanes
        self._most = most
        self._size_of = size_of
        self._most_bytes = most_bytes
        self._tables: dict[K, _Table[I]] = {}
        self._groups: set[asyncio.Task[None]] = set()
        self.groups_sent = 0
        """Groups sent so far (each one statement)."""
        self.members_sent = 0
        """The writes those groups carried."""

    def enter(self, key: K) -> bool:
        """Take a free lane of ``key`` for a lone create (then :meth:`leave` it), or ``False``
        when every lane is busy (then :meth:`join` a group)."""
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Table()
        if table.busy >= self._lanes or table.waiting:
            return False
        table.busy += 1
        return True

    def leave(self, key: K) -> None:
        """Free a lane of ``key``; what waits for it goes as one group."""
        table = self._tables[key]
        table.busy -= 1
        if table.waiting:
            self._start_group(key, table)
        elif table.busy == 0:
            del self._tables[key]

    async def join(self, key: K, item: I) -> bool | None:
        """Wait for ``item``'s group: ``True`` its row landed, ``False`` its path was taken,
        ``None`` the group was refused whole and nothing of it was written (write alone)."""
        table = self._tables[key]
        future: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        entry = (item, future)
        table.waiting.append(entry)
        if table.busy < self._lanes:  # a lane freed between enter and join
            self._start_group(key, table)
        try:
            return await future
        except asyncio.CancelledError:
            for position, (_, waiting) in enumerate(table.waiting):
                if waiting is future:  # not sent yet: nothing of it is written
                    del table.waiting[position]
                    break
            if not table.waiting and table.busy == 0 and self._tables.get(key) is table:
                del self._tables[key]
            raise

    def _start_group(self, key: K, table: _Table[I]) -> None:
        group: list[tuple[I, asyncio.Future[bool | None]]] = []
        rest: list[tuple[I, asyncio.Future[bool | None]]] = []
        paths: set[str] = set()
        budget = self._most_bytes
        waiting = table.waiting
        for position, entry in enumerate(waiting):
            if len(group) == self._most:  # full: the rest waits for the next group, in order
                rest.extend(waiting[position:])
                break
            if entry[1].done():  # its member was cancelled and has not run its handler yet
                continue
            path = self._path_of(entry[0])
            size = self._size_of(entry[0])
            if path not in paths and (size <= budget or not group):  # a row over it: alone
                paths.add(path)
                group.append(entry)
                budget -= size
            else:
                rest.append(entry)  # a second write of one path waits for the next group
        table.waiting = rest
        if not group:  # every waiting member was cancelled: nothing to send
            if table.busy == 0 and not rest and self._tables.get(key) is table:
                del self._tables[key]
            return
        table.busy += 1
        task = asyncio.get_running_loop().create_task(self._run_group(key, group))
        self._groups.add(task)
        task.add_done_callback(self._groups.discard)

    async def _run_group(
        self, key: K, group: Sequence[tuple[I, asyncio.Future[bool | None]]]
    ) -> None:
        try:
            self.groups_sent += 1
            self.members_sent += len(group)
            landed = await self._send(key, [item for item, _ in group])
        except Exception as exc:  # noqa: BLE001 - every member's outcome, raised by each
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
        else:
            for item, future in group:
                if not future.done():
                    future.set_result(None if landed is None else self._path_of(item) in landed)
        finally:
            for _, future in group:  # cancelled (the store closing), or the process stopping
                if not future.done():
                    future.cancel()
            self.leave(key)
