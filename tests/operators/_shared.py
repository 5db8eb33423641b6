"""Helpers shared by the operator tests: a connect fault, a timeline of recorded messages, and
for the asyncio twins scripted async generators and a virtual-time driver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from reactivex.testing import TestScheduler
from reactivex.testing.recorded import Recorded

from rxmesh.exceptions import StoreError


def connect_fault() -> StoreError:
    """The incident's chain: a DB frame with no sqlstate raised from ConnectionResetError(104)."""
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except OSError as exc:
            raise StoreError("lost connection to postgres@db:5432", sqlstate=None) from exc
    except StoreError as err:
        return err


def timeline(messages: list[Recorded[Any]]) -> list[tuple[Any, ...]]:
    """(time, kind, value-or-exception); exceptions compare by identity."""
    out: list[tuple[Any, ...]] = []
    for message in messages:
        note: Any = message.value
        if note.kind == "N":
            out.append((message.time, "N", note.value))
        elif note.kind == "E":
            out.append((message.time, "E", note.exception))
        else:
            out.append((message.time, "C"))
    return out


class Script:
    """Each call opens the next scripted async generator: its items, then its fault (or its end).

    ``calls`` counts openings, ``closed`` counts generators closed, ``args`` records each call's
    arguments; an opening given ``fault=None`` and ``hang=True`` waits forever after its items.
    """

    def __init__(self, *openings: tuple[list[Any], BaseException | None]) -> None:
        self.openings = list(openings)
        self.calls = 0
        self.closed = 0
        self.args: list[tuple[Any, ...]] = []
        self.hang = False

    def __call__(self, *args: Any) -> AsyncIterator[Any]:
        self.calls += 1
        self.args.append(args)
        items, fault = self.openings.pop(0)
        return self._run(items, fault)

    async def _run(self, items: list[Any], fault: BaseException | None) -> AsyncIterator[Any]:
        try:
            for item in items:
                yield item
            if fault is not None:
                raise fault
            if self.hang:
                await asyncio.Event().wait()
        finally:
            self.closed += 1


async def consume(
    iterator: AsyncIterator[Any], scheduler: TestScheduler, *, step: float = 0.05
) -> tuple[list[Any], BaseException | None]:
    """Iterate to the end on virtual time (advanced in ``step``s): the items and what ended it."""
    items: list[Any] = []

    async def run() -> None:
        async for item in iterator:
            items.append(item)

    task = asyncio.ensure_future(run())
    async with asyncio.timeout(10):
        while not task.done():
            await asyncio.sleep(0)
            scheduler.advance_by(step)
            await asyncio.sleep(0)
    return items, task.exception()


async def run_until(condition: Any, scheduler: TestScheduler | None = None) -> None:
    """Let the loop (and virtual time, in steps of 0.05) run until ``condition()`` holds."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)
            if scheduler is not None:
                scheduler.advance_by(0.05)
