"""Type-only use of the asyncio surface (mypy checks it; never run)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from reactivex import Observable

from rxmesh.aio import (
    ObservableIterator,
    iterate,
    reopen_on_transient_fault_async,
    retry_transient_connect_async,
)
from rxmesh.model import NodeQuery, QueryFrame


@retry_transient_connect_async(delays=(0.1,))
async def orders(partition: str) -> AsyncIterator[int]:
    yield len(partition)


@reopen_on_transient_fault_async(backoff=(1, 2))
async def census(query: NodeQuery) -> AsyncIterator[QueryFrame]:
    yield QueryFrame.initial([])


async def a_program(live: Observable[QueryFrame]) -> list[object]:
    frames: ObservableIterator[QueryFrame] = iterate(live, max_pending=10)
    seen: list[object] = [frame.kind async for frame in frames]
    seen += [n + 1 async for n in orders("shop")]
    seen += [frame.nodes async for frame in census(NodeQuery(node_type="NodeType"))]
    watch: AsyncIterator[QueryFrame] = reopen_on_transient_fault_async(lambda: iterate(live))
    seen += [frame async for frame in watch]
    return seen
